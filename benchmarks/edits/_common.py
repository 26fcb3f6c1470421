"""What both scripts here share: the default pair loaded as the comparison loads it, and a switch
for the edits a copy makes again."""
from edgespec.api import Speculator
from edgespec.models.registry import load_registry
from edgespec.models import files
import edgespec.engine.suffix as sx
ref = load_registry().default_pair
pair = (files.fetch(ref.target).path, files.fetch(ref.draft).path)
spec = Speculator.load(target=str(pair[0]), draft=str(pair[1]), drafter="auto", keep_draft=True, n_ctx=4096, n_threads=2)
_apply, _track = sx.Edits.apply, sx.Edits.track
def edits(on):
    if on: sx.Edits.apply, sx.Edits.track = _apply, _track
    else:
        sx.Edits.apply = lambda self, copy, k: list(copy[:k]); sx.Edits.track = lambda *a: None
