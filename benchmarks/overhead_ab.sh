#!/usr/bin/env bash
# Did a change cost annotation time? pyprof's default markers, this tree ("new") against an
# older tree carried as .prev ("old": `git archive COMMIT | tar -x -C .prev`), in one device call,
# sides taking turns for ROUNDS rounds (default 3): in each, benchmarks/overhead.py of that side
# with --steps 10 --blocks BLOCKS (default 3; 40 gives each process's on/off a 95% interval of a
# few percent) --warmup 3 --no-calls --repeats 1 --modes pyprof --models MODELS (default
# lenet,resnet18,gpt), each side's C hit path built first. The figure to read: markers
# off/on alternately inside each process ("in-process ... on/off"), per round and side.
#   bash benchmarks/overhead_ab.sh        # carry: [".devkit", ".prev"]; writes $OUT/overhead_ab.txt
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"; kit=${KIT:-.devkit}; old=${OLD:-.prev}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$kit"/wheels/*.whl 2>/dev/null
exec > >(tee -a "$out/overhead_ab.txt") 2>&1
for side in . "$old"; do (cd "$side" && python3 setup.py -q build_ext --inplace >/dev/null 2>&1); done
echo "new: $(git log -1 --format='%h %cI' 2>/dev/null || echo this tree); old: $old ($(cat "$old/COMMIT" 2>/dev/null))"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for round in $(seq "${ROUNDS:-3}"); do
  for side in new old; do
    dir=.; [ "$side" = old ] && dir=$old
    echo "== round $round $side"
    (cd "$dir" && PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 timeout "${ROUND_S:-80}" python3 benchmarks/overhead.py \
      --steps 10 --blocks "${BLOCKS:-3}" --warmup 3 --no-calls --repeats 1 --modes pyprof --models "${MODELS:-lenet,resnet18,gpt}" \
      --timeout 70) 2>&1 | grep -E "in-process off|on/off within" || echo "  (no figure: rc or timeout)"
  done
done
