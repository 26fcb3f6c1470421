"""`LlamaModel`, the engine's model protocol over llama.cpp's C API for a GGUF file (target and
draft alike): decode chains, trees and several sequences, with logits only where asked."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

import llama_cpp
import numpy as np

from edgespec.errors import EdgespecError, ModelLoadError
from edgespec.llamacpp import backend
from edgespec.llamacpp.vocab import LlamaVocab
from edgespec.system import hugepages
from edgespec.system.device import performance_cores


def tree_layout(parents: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Each row's depth and sequences (one per leaf; a row is in those of the leaves below it),
    so that llama.cpp's mask lets a row attend to exactly its ancestors."""
    depth: list[int] = []
    for i, parent in enumerate(parents):
        if (parent == -1) != (i == 0) or parent >= i:
            raise ValueError(
                f"row {i}: parent {parent} (row 0 is the root, the others follow earlier rows)"
            )
        depth.append(0 if parent < 0 else depth[parent] + 1)
    has_child = {p for p in parents if p >= 0}
    seqs: list[list[int]] = [[] for _ in parents]
    for seq, leaf in enumerate(i for i in range(len(parents)) if i not in has_child):
        row = leaf
        while row >= 0:
            seqs[row].append(seq)
            row = parents[row]
    for row_seqs in seqs:
        row_seqs.sort()
    return depth, seqs


@dataclass(frozen=True, kw_only=True)
class LoadOptions:
    n_ctx: int = 4096
    n_threads: int | None = None  # None: the performance cores (system/device.py)
    n_gpu_layers: int = 0  # -1: all layers when the build can offload
    n_batch: int = 512
    # RPC servers (HOST:PORT) that take the layers, in these proportions
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    # Sequences for a tree draft's leaves, verified in one pass (the target).
    tree_width: int = 1
    # Sequences of up to n_ctx positions each (a server's slots, see `decode_batch`).
    sequences: int = 1
    huge_pages: bool = False  # CPU weights on transparent huge pages (system/hugepages.py)
    flash_attn: bool | None = None  # None: llama.cpp decides (its "auto")


def _rpc_devices(servers: Sequence[str]) -> list[int]:
    """Register the RPC servers with ggml, which aborts the process where one cannot be reached
    (callers probe first, in a child process)."""
    if not backend.supports_rpc():
        raise ModelLoadError(
            "this llama.cpp build has no RPC backend; reinstall with scripts/install.sh"
        )
    devices = []
    for server in servers:
        reg = backend.ggml("ggml_backend_rpc_add_server")(server.encode())
        if not reg:
            raise ModelLoadError(f"llama.cpp could not register RPC server {server}")
        count = backend.ggml("ggml_backend_reg_dev_count")(reg)
        devices += [backend.ggml("ggml_backend_reg_dev_get")(reg, i) for i in range(count)]
    return devices


def _context_params(options: LoadOptions) -> Any:
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = options.n_ctx * options.sequences
    cparams.n_batch = options.n_batch
    cparams.n_ubatch = options.n_batch
    # A tree's sequences (or slots) share the cells: one unified cache, not a stream each.
    cparams.n_seq_max = max(options.tree_width, options.sequences)
    cparams.kv_unified = True
    # llama.cpp's default is 4 threads anywhere; decoding is fastest on the performance cores.
    threads = options.n_threads or performance_cores()
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    if options.flash_attn is not None:
        cparams.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if options.flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
    return cparams


class LlamaModel(LlamaVocab):
    """A GGUF model and one llama.cpp context: sequence 0, a tree's leaves beside it, or a
    server's slots (`LoadOptions.sequences`)."""

    def __init__(self, path: str | os.PathLike[str], options: LoadOptions | None = None) -> None:
        options = options or LoadOptions()
        self.path = Path(path)
        self.options = options
        self.huge_pages: hugepages.HugePageLoad | None = None  # how the weights were advised
        backend.init_backend()
        mparams = llama_cpp.llama_model_default_params()
        if options.rpc:
            self._place_on_servers(mparams, options)
        else:
            mparams.n_gpu_layers = options.n_gpu_layers if backend.supports_gpu_offload() else 0
        if mparams.n_gpu_layers == 0:
            # llama.cpp repacks CPU weights into a second buffer: mapped, both copies stay resident.
            mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
            if options.huge_pages and hugepages.available():
                self._advise_huge_pages(mparams)
        # A GPU (or a server's device) compiles or allocates for each new batch shape: the
        # engine runs each once before a round times it (engine/warmup.py).
        self.warms_shapes = mparams.n_gpu_layers != 0
        model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not model:
            raise ModelLoadError(f"llama.cpp could not load {self.path} (see EDGESPEC_DEBUG=1)")
        self._model = model
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        cparams = _context_params(options)
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            self.close()
            raise ModelLoadError(
                f"llama.cpp could not create a context of {options.n_ctx} tokens for "
                f"{self.path.name}; try a smaller --ctx-size"
            )
        self._ctx = ctx
        # llama.cpp pads the context and may lower n_batch: keep to what was asked, in its chunks.
        self.n_ctx = min(options.n_ctx, int(llama_cpp.llama_n_ctx(ctx)))
        self.n_threads = int(cparams.n_threads)
        self._n_batch = min(options.n_batch, int(llama_cpp.llama_n_batch(ctx)))
        self.tree_width = options.tree_width
        self.sequences = options.sequences
        self._batch = llama_cpp.llama_batch_init(
            self._n_batch, 0, max(self.tree_width, self.sequences)
        )
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._tree: tuple[int, list[list[int]]] | None = None  # a pending tree: base, seqs
        self._pieces: dict[int, bytes] = {}
        self._no_rows = np.empty((0, self.n_vocab), dtype=np.float32)
        # Time inside llama.cpp's decode and how many decodes (`edgespec bench` reports the rest).
        self.decode_s = 0.0
        self.decodes = 0
        self.logits_s = 0.0  # of decode_s, the rows handed over (lent or copied out)

    def _advise_huge_pages(self, mparams: Any) -> None:
        self.huge_pages = hugepages.HugePageLoad()
        advise = self.huge_pages
        # Kept on the object: llama.cpp calls it while loading.
        self._progress = llama_cpp.llama_progress_callback(lambda progress, _: advise(progress))
        mparams.progress_callback = self._progress

    def _place_on_servers(self, mparams: Any, options: LoadOptions) -> None:
        """The planned layers (-1: all) on the RPC servers' devices, in the planned proportions."""
        devices = _rpc_devices(options.rpc)
        # Kept on the object: llama.cpp reads both arrays while loading.
        self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
        split = list(options.tensor_split) or [1.0] * len(devices)
        n_split = int(llama_cpp.llama_max_devices())
        self._split = (ctypes.c_float * n_split)(*split[:n_split])
        mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        mparams.tensor_split = self._split
        mparams.n_gpu_layers = options.n_gpu_layers

    @property
    def n_past(self) -> int:
        # Asked, not counted: a Ctrl-C right after llama_decode must not leave a wrong count.
        return self.seq_past(0)

    def decode(
        self, tokens: Sequence[int], n_logits: int = 1, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Append `tokens` to the cache; return logits of the last `n_logits` positions (written
        into the first rows of `out` when given)."""
        return self._decode(tokens, n_logits, out, lend=False)

    def decode_lent(self, tokens: Sequence[int], n_logits: int = 1) -> np.ndarray:
        """`decode`, the rows lent (no copy): a read-only view of llama.cpp's buffer where it can
        be, valid until this model's next decode or close."""
        return self._decode(tokens, n_logits, None, lend=True)

    def _decode(
        self, tokens: Sequence[int], n_logits: int, out: np.ndarray | None, lend: bool
    ) -> np.ndarray:
        n = len(tokens)
        if not 0 <= n_logits <= n:
            raise ValueError(f"n_logits={n_logits} for {n} tokens")
        past = self.n_past
        if past + n > self.n_ctx:
            raise EdgespecError(f"{past + n} tokens do not fit the context of {self.n_ctx}")
        # Lent rows: one chunk only, whose outputs are all in llama.cpp's buffer at the end.
        lend = lend and n <= self._n_batch
        if out is None and not lend:
            out = np.empty((n_logits, self.n_vocab), dtype=np.float32)
        started = perf_counter()
        batch = self._batch
        first_out = n - n_logits
        row = 0
        for start in range(0, n, self._n_batch):
            chunk = tokens[start : start + self._n_batch]
            batch.n_tokens = len(chunk)
            for i, tok in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = start + i >= first_out
            rc = llama_cpp.llama_decode(self._ctx, batch)
            if rc != 0:
                # Whatever llama.cpp managed to write for this chunk is dropped again.
                self.rewind(past)
                raise EdgespecError(f"llama_decode failed with code {rc} at position {past}")
            past += len(chunk)
            rows = perf_counter()
            if out is None:
                out = self._lent_rows(first_out, n_logits)
                if len(out) == n_logits:
                    self.logits_s += perf_counter() - rows
                    break
                out = np.empty((n_logits, self.n_vocab), dtype=np.float32)
            for i in range(max(0, first_out - start), len(chunk)):
                self._logits_into(out[row], i)
                row += 1
            self.logits_s += perf_counter() - rows
        self.decode_s += perf_counter() - started
        self.decodes += 1
        assert out is not None
        return out[:n_logits]

    def seq_past(self, seq: int) -> int:
        """How many positions sequence `seq` holds (a slot's, see `decode_batch`)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self._memory, seq)) + 1

    def seq_rewind(self, seq: int, n_past: int) -> None:
        """Drop sequence `seq`'s positions >= n_past."""
        if not 0 <= n_past <= self.seq_past(seq):
            raise ValueError(f"cannot rewind sequence {seq} to {n_past}")
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq, n_past, -1):
            raise EdgespecError(f"{self.path.name}: the KV cache cannot be truncated")

    def decode_batch(self, requests: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        """Several sequences' tokens in one batch (chunked by n_batch): for each (seq, tokens,
        n_logits), the logits of the last `n_logits` positions (copies)."""
        flat: list[tuple[int, int, int, np.ndarray | None]] = []  # token, seq, position, row
        starts: dict[int, int] = {}  # each sequence's length before this batch
        out = []
        for seq, tokens, n_logits in requests:
            if not 0 <= seq < self.sequences or not 0 <= n_logits <= len(tokens):
                raise ValueError(f"sequence {seq} of {self.sequences}, n_logits={n_logits}")
            past = starts.setdefault(seq, self.seq_past(seq))
            if past + len(tokens) > self.n_ctx:
                raise EdgespecError(
                    f"{past + len(tokens)} tokens do not fit the context of {self.n_ctx}"
                )
            rows = np.empty((n_logits, self.n_vocab), dtype=np.float32)
            first = len(tokens) - n_logits
            for i, tok in enumerate(tokens):
                flat.append((tok, seq, past + i, rows[i - first] if i >= first else None))
            out.append(rows)
        started = perf_counter()
        batch = self._batch
        for start in range(0, len(flat), self._n_batch):
            chunk = flat[start : start + self._n_batch]
            batch.n_tokens = len(chunk)
            for i, (tok, seq, pos, row) in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = pos
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = row is not None
            rc = llama_cpp.llama_decode(self._ctx, batch)
            if rc != 0:
                # Every sequence goes back to where it was before this batch.
                for seq, past in starts.items():
                    llama_cpp.llama_memory_seq_rm(self._memory, seq, past, -1)
                raise EdgespecError(f"llama_decode failed with code {rc} (a batch of sequences)")
            for i, (_, _, _, row) in enumerate(chunk):
                if row is not None:
                    self._logits_into(row, i)
        self.decode_s += perf_counter() - started
        self.decodes += 1
        return out

    def decode_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Decode a tree after the cached tokens in one batch (the engine's TreeModel): a sequence
        per leaf, each node at the position of its depth; the context's cells are shared."""
        return self._decode_tree(tokens, parents, lend=False)

    def decode_tree_lent(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """`decode_tree`, the rows lent as `decode_lent` lends them."""
        return self._decode_tree(tokens, parents, lend=True)

    def _decode_tree(self, tokens: Sequence[int], parents: Sequence[int], lend: bool) -> np.ndarray:
        n, base = len(tokens), self.n_past
        depth, seqs = tree_layout(parents)
        width = len(seqs[0])
        if width > self.tree_width or n > self._n_batch:
            raise ValueError(f"a tree of {n} tokens, {width} leaves does not fit one batch")
        if base + n > self.n_ctx:
            raise EdgespecError(f"{base + n} tokens do not fit the context of {self.n_ctx}")
        started = perf_counter()
        memory = self._memory
        for s in range(1, width):
            llama_cpp.llama_memory_seq_rm(memory, s, -1, -1)
            llama_cpp.llama_memory_seq_cp(memory, 0, s, -1, -1)
        batch = self._batch
        batch.n_tokens = n
        for i, tok in enumerate(tokens):
            batch.token[i] = tok
            batch.pos[i] = base + depth[i]
            batch.n_seq_id[i] = len(seqs[i])
            for j, s in enumerate(seqs[i]):
                batch.seq_id[i][j] = s
            batch.logits[i] = True
        self._tree = (base, seqs)
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if rc != 0:
            self.rewind(base)
            raise EdgespecError(f"llama_decode failed with code {rc} at position {base}")
        rows = perf_counter()
        out = self._lent_rows(0, n) if lend else self._no_rows
        if len(out) != n:
            out = np.empty((n, self.n_vocab), dtype=np.float32)
            for i in range(n):
                self._logits_into(out[i], i)
        self.logits_s += perf_counter() - rows
        # Counted like a chain's decode, or `bench` would take it for Python's own time.
        self.decode_s += perf_counter() - started
        self.decodes += 1
        return out

    def _lent_rows(self, first: int, n: int) -> np.ndarray:
        """The last batch's outputs `first`.. `first + n - 1` as a read-only view of llama.cpp's
        buffer where they are contiguous, else no rows."""
        if n == 0:
            return self._no_rows
        row_bytes = self.n_vocab * 4
        start = ctypes.cast(llama_cpp.llama_get_logits_ith(self._ctx, first), ctypes.c_void_p)
        end = ctypes.cast(llama_cpp.llama_get_logits_ith(self._ctx, first + n - 1), ctypes.c_void_p)
        if not start.value or end.value != start.value + (n - 1) * row_bytes:
            return self._no_rows
        memory = (ctypes.c_char * (n * row_bytes)).from_address(start.value)
        rows = np.frombuffer(memoryview(memory), dtype=np.float32).reshape(n, self.n_vocab)
        rows.flags.writeable = False
        return rows

    def _logits_into(self, row: np.ndarray, i: int) -> None:
        """Copy the logits of the last batch's output `i` into `row` (float32, n_vocab)."""
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, i)
        ctypes.memmove(row.ctypes.data, ptr, self.n_vocab * 4)

    def keep_path(self, rows: Sequence[int]) -> None:
        """Keep one path of the pending tree in sequence 0; every other cell of it goes."""
        if self._tree is None:
            raise ValueError("no tree to keep a path of")
        base, seqs = self._tree
        self._tree = None
        memory = self._memory
        leaf = seqs[rows[-1]][0]  # a sequence the whole path is in
        llama_cpp.llama_memory_seq_keep(memory, leaf)
        if leaf != 0:
            llama_cpp.llama_memory_seq_cp(memory, leaf, 0, -1, -1)
            llama_cpp.llama_memory_seq_keep(memory, 0)
        llama_cpp.llama_memory_seq_rm(memory, 0, base + len(rows), -1)

    def rewind(self, n_past: int) -> None:
        """Drop every cached position >= n_past (of every sequence: a tree's too)."""
        held = self.n_past
        if n_past < 0 or n_past > held:
            raise ValueError(f"cannot rewind to {n_past} (cache holds {held})")
        self._tree = None
        if not llama_cpp.llama_memory_seq_rm(self._memory, -1, n_past, -1):
            raise EdgespecError(
                f"{self.path.name}: the KV cache cannot be truncated (recurrent or hybrid "
                "model); speculative decoding needs a transformer model"
            )

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        self.close()
