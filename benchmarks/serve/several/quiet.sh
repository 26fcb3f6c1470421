# What every quiet-machine run script of this folder (quiet/, medians/, heavy/) shares; sourced
# from the repository root with `out` set to the run's folder. `begin PLAN_ARGS...` records when
# and how loaded the machine was, then recalibrates; `load NAME LOAD_ARGS...` runs
# benchmarks/serve/load.py into NAME.json and NAME.log, noting its start in progress.txt.
export PYTHONPATH=.
begin() {
    date > "$out/start.txt"; uptime >> "$out/start.txt"
    edgespec plan "$@" --recalibrate --offline > "$out/plan.txt" 2>&1
}
load() {
    name=$1; shift
    echo "$(date +%T) $name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/progress.txt"
    python benchmarks/serve/load.py --start --out "$out/$name.json" "$@" > "$out/$name.log" 2>&1
}
