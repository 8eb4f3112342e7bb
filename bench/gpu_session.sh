#!/usr/bin/env bash
# One device call on a lent H200: the GPU tests, then every benchmark the open issues cite,
# with their reports written under $OUT (copy them to bench/results/ afterwards).
#
#   bench/gpu_session.sh tests     # the GPU tests (about 4 minutes)
#   bench/gpu_session.sh engine    # gpu_bench (issue 17) and Engine.embed on text (issue 16)
#   bench/gpu_session.sh load      # the load generator with default flags, four workloads (issue 16)
#   bench/gpu_session.sh text      # the text side: Engine.embed on text (piece sizes compared), then the
#                                  # load generator on MiniLM and BERT-base paragraphs (issue 16)
#   bench/gpu_session.sh leads     # issue 17's open leads: the packed attention's tiles and options swept,
#                                  # the matmuls at the sizes around the top bucket, the profile at the graph's size
#   bench/gpu_session.sh kernels   # issue 17: the attention's GPU tests, then each pass of a layer against
#                                  # its hardware floor (bench/kernel_floors.py)
#   bench/gpu_session.sh sweep     # issue 17: the packed attention's GPU tests, then its default launches
#                                  # swept over register caps, scale folding and TMA loads, about 3 minutes
#   bench/gpu_session.sh stalls    # issue 17: where the packed attention's warps wait (Nsight Compute's
#                                  # counters, bench/attention_stalls.py) and the clocks under load
#   bench/gpu_session.sh clocks    # issue 17: clocks, power and throttle reasons while BERT-base's whole model
#                                  # and its dense ceiling run (bench/clock_phases.py reads the samples)
#   bench/gpu_session.sh gemm      # issue 17: a Triton GEMM against cuBLAS, plain and with SwiGLU in its
#                                  # epilogue (bench/gemm_epilogue_probe.py)
#   bench/gpu_session.sh flashinfer # issue 17: FlashInfer's tests, then gpu_bench with varlen, packed and
#                                  # FlashInfer side by side (whole models and each class's attention); carry .whl-fi alone
#   bench/gpu_session.sh ratios    # gpu_bench alone: ours against the ceiling and Hugging Face (issue 17)
#   bench/gpu_session.sh queries   # MiniLM's queries/docs, 32,768 queries against 4,096, twice each (about 3 minutes)
#   bench/gpu_session.sh timeline  # MiniLM and BERT-base passes batch by batch: the device's busy and idle
#                                  # time, the host's per batch, kernels side by side, where vectors land
#                                  # (bench/pass_timeline.py, under a minute)
#   bench/gpu_session.sh sustained # gpu_bench on the default backend, bursts and 5 s back to back (the power limit)
#   bench/gpu_session.sh profile   # kernel by kernel with the packed attention, GELU in the matmul's
#                                  # epilogue or not, py-spy over the server under load, documents
#   bench/gpu_session.sh fa4-first # FlashAttention 4: the first of two calls (docs/gpu.md's recipe)
#   bench/gpu_session.sh fa4       # ... the second: FA4 against varlen and packed (bench/fa4_probe.py)
#
# A device call runs at most 10 minutes: one mode per call.
#
# Needs what docs/gpu.md's recipe puts in the git-ignored folders named in the call's carry:
# .whl/ (wheels) and .carry/minilm + .carry/pkgs (the default model's tokenizer files and
# a stand-in package). Each step's exit status is printed; a failing step does not stop the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
# FlashInfer's wheel travels alone, in a call after one that brought .whl/ (docs/gpu.md).
[ -d .whl-fi ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-fi/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:.carry/pkgs:${PYTHONPATH:-}

# A call brings back at most 8 files from $OUT: a step's log comes back only where the step
# failed or KEEP_LOGS is set, and a mode writes no more than 8 reports.
step() {  # name, command...
    local name=$1
    shift
    local started=$SECONDS log=/tmp/step-logs/$name.log
    mkdir -p /tmp/step-logs
    "$@" > "$log" 2>&1
    local status=$?
    echo "$name: exit $status in $((SECONDS - started)) s; $(tail -n 1 "$log")"
    if [ $status -ne 0 ] || [ -n "${KEEP_LOGS:-}" ]; then cp "$log" "$OUT/"; fi
}

models() {
    [ -d /tmp/minilm-random ] || python3 bench/tiny_model.py /tmp/minilm-random --hidden 384 --layers 6 --heads 12 --source .carry/minilm
    [ -d /tmp/bert-base-random ] || python3 bench/tiny_model.py /tmp/bert-base-random --hidden 768 --layers 12 --source .carry/minilm
    [ -d /tmp/qwen3-random ] || python3 bench/tiny_model.py /tmp/qwen3-random --arch qwen3-0.6b --source .carry/minilm
}

load_gen() {  # report name, model, extra flags...
    local name=$1 model=$2
    shift 2
    step "$name" python3 bench/load_gen.py --device cuda --clients 64 --procs 8 --rounds 3 --no-st \
        --model "$model" --out "$OUT/$name.md" "$@"
}

case "${1:-tests}" in
tests)
    KEEP_LOGS=1 step gpu-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
        tests/test_gpu.py tests/test_gpu_capture.py tests/test_gpu_stress.py tests/test_qwen3_gpu.py \
        tests/test_fused_gpu.py tests/test_architectures_gpu.py tests/test_packed_attention_gpu.py \
        tests/test_st_modules.py tests/test_contextualized_gpu.py tests/test_long_inputs_devices.py
    ;;
engine)
    models >/tmp/models.log 2>&1
    step gpu-bench python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --gelu-both \
        --out "$OUT/gpu.md"
    step embed-pipeline python3 bench/embed_pipeline.py --model /tmp/minilm-random --device cuda \
        --threads 0,4 --processes 4,8 --out "$OUT/embed-pipeline-gpu-minilm.md"
    ;;
load)
    models >/tmp/models.log 2>&1
    load_gen e2e-gpu-minilm /tmp/minilm-random --num-texts 12061 --join 1 --repeat 4 --latency-queries 0
    load_gen e2e-gpu-bert-base /tmp/bert-base-random --num-texts 12061 --join 1 --repeat 4 --latency-queries 200
    load_gen e2e-gpu-bert-base-docs /tmp/bert-base-random --num-texts 3000 --join 4 --repeat 4 --latency-queries 0
    load_gen e2e-gpu-qwen3 /tmp/qwen3-random --num-texts 12061 --repeat 3 --latency-queries 200
    ;;
text)
    models >/tmp/models.log 2>&1
    step embed-pipeline python3 bench/embed_pipeline.py --model /tmp/minilm-random --device cuda --rounds 5 \
        --threads 0 --processes 4,8 --process-pieces 256 --out "$OUT/embed-pipeline-gpu-minilm.md"
    load_gen e2e-gpu-minilm /tmp/minilm-random --num-texts 12061 --join 1 --repeat 4 --latency-queries 0
    load_gen e2e-gpu-bert-base /tmp/bert-base-random --num-texts 12061 --join 1 --repeat 4 --latency-queries 200
    ;;
leads)
    # The two short ones first: the sweep may take minutes, and writes its report shape by shape.
    step matmul-sizes python3 bench/matmul_sizes.py --out "$OUT/matmul-sizes.md"
    step gpu-profile-filled python3 bench/gpu_profile.py --backend packed --models bert-base,qwen3-0.6b --fill \
        --out "$OUT/gpu-profile-filled.md"
    step attention-tiles python3 bench/attention_tiles.py --out "$OUT/attention-tiles.md"
    ;;
kernels)
    KEEP_LOGS=1 step attention-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
        tests/test_packed_attention_gpu.py tests/test_qwen3_gpu.py tests/test_architectures_gpu.py
    step kernel-floors python3 bench/kernel_floors.py --out "$OUT/kernel-floors.md"
    step kernel-floors-cold python3 bench/kernel_floors.py --cold --out "$OUT/kernel-floors-cold.md"
    ;;
sweep)
    KEEP_LOGS=1 step attention-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/test_packed_attention_gpu.py \
        tests/test_fused_gpu.py -k "kernel_matches or graph or auto_chooses or biased"
    step attention-tiles python3 bench/attention_tiles.py --models bert-base,qwen3-0.6b,minilm --around-default \
        --stages 3 --max-registers none,128 --fold-scale both --tma-loads both --out "$OUT/attention-tiles.md"
    ;;
stalls)
    # Where the packed attention's warps wait (Nsight Compute, if the machine has it), and the
    # clocks under sustained load (whole models run their kernels slower than alone).
    NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
    echo "ncu: ${NCU:-none}"
    for model in bert-base qwen3-0.6b minilm; do
        [ -n "$NCU" ] && KEEP_LOGS=1 step "stalls-$model" "$NCU" --kernel-name regex:_packed_attention_kernel --launch-skip 3 \
            --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            python3 bench/attention_stalls.py --model "$model"
    done
    KEEP_LOGS=1 step clocks bash -c 'nvidia-smi -q -d CLOCK,PERFORMANCE,POWER; python3 bench/kernel_floors.py --out /tmp/floors.md & for i in 1 2 3 4 5 6; do sleep 1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active --format=csv,noheader; done; wait'
    ;;
clocks)
    # The SM clock, power and throttle reasons sampled every 100 ms while gpu_bench times
    # BERT-base's whole model and its dense ceiling (more repeats than usual, so each phase
    # spans many samples); gpu_bench's lines carry the time they were printed, to match.
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 100 > "$OUT/clocks.csv" &
    sampler=$!
    python3 -u bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --models bert-base --backends auto \
        --repeats 20 --out "$OUT/gpu-clocks.md" 2>&1 | while IFS= read -r line; do echo "$(date +%H:%M:%S.%N) $line"; done \
        > "$OUT/gpu-clocks.log"
    kill $sampler
    tail -n 3 "$OUT/gpu-clocks.log"
    ;;
gemm)
    # Whether a Triton GEMM keeps pace with cuBLAS on the layers' shapes, plain and with the
    # Qwen3 shape's SwiGLU in its epilogue (about a minute).
    step gemm-epilogue-probe python3 bench/gemm_epilogue_probe.py --out "$OUT/gemm-epilogue-probe.md"
    ;;
flashinfer)
    # Carry .whl-fi alone, after a call that carried .whl and .carry, on the same warm machine.
    python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)"
    KEEP_LOGS=1 step flashinfer-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/test_gpu.py \
        tests/test_qwen3_gpu.py tests/test_contextualized_gpu.py -k flashinfer
    step gpu-bench-flashinfer python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json \
        --models bert-base,qwen3-0.6b --backends varlen,packed,flashinfer --out "$OUT/gpu-flashinfer.md"
    ;;
queries)
    # MiniLM's queries/docs on both sizes of the queries workload, taken in turn on one machine:
    # whether it holds from run to run.
    for round in 1 2; do
        for queries in 32768 4096; do
            step "gpu-bench-minilm-q$queries-$round" python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json \
                --models minilm --backends auto --queries "$queries" --out "$OUT/gpu-minilm-q$queries-$round.md"
            grep -A4 '^## Per backend' "$OUT/gpu-minilm-q$queries-$round.md" | tail -n 1
        done
    done
    ;;
timeline)
    # Where a pass's time goes, per workload: batch by batch, the device's busy and idle time,
    # the host's, the kernels side by side, and what landing the vectors costs.
    step pass-timeline python3 bench/pass_timeline.py --models minilm,bert-base --out "$OUT/pass-timeline.md"
    cat "$OUT/pass-timeline.md"
    ;;
ratios)
    step gpu-bench python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --gelu-both --sustained 5 \
        --out "$OUT/gpu.md"
    ;;
sustained)
    # The default backend only, each model's docs and its ceiling also timed for 5 s back to back.
    step gpu-bench python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --backends auto \
        --sustained 5 --out "$OUT/gpu-sustained.md"
    grep -A 6 "^## Sustained" "$OUT/gpu-sustained.md"
    ;;
profile)
    models >/tmp/models.log 2>&1
    export PATH=/tmp/site/bin:$PATH  # py-spy, from its wheel in .whl/
    step gpu-profile python3 bench/gpu_profile.py --backend packed --out "$OUT/gpu-profile-packed.md"
    load_gen e2e-gpu-bert-base-profiled /tmp/bert-base-random --num-texts 12061 --join 1 --repeat 4 \
        --latency-queries 0 --py-spy "$OUT/e2e-gpu-bert-base.pyspy.txt"
    load_gen e2e-gpu-bert-base-docs /tmp/bert-base-random --num-texts 3000 --join 4 --repeat 4 --latency-queries 0
    # Last: torch.compile's autotuning may take minutes, and a call cut short keeps what is written.
    step mlp-epilogue python3 bench/mlp_epilogue.py --out "$OUT/mlp-epilogue.md"
    ;;
fa4-first)
    # The CuTe DSL's CUDA 13 libraries are one 92 MB wheel, more than a call carries: its first
    # half comes with .whl-fa4/ here and waits on the warm machine for the second.
    ls -l .whl-fa4/
    ;;
fa4)
    cat .whl-fa4/libs-cu13.part-aa .fa4-second/libs-cu13.part-ab \
        > /tmp/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-fa4 .whl-fa4/*.whl \
        /tmp/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
    # --target skips the wheel's .pth, which puts the DSL's own packages on the path.
    PYTHONPATH=/tmp/site-fa4:/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages:.carry/fa4:$PYTHONPATH \
        step fa4-probe python3 bench/fa4_probe.py --out "$OUT/fa4-probe.md"
    ;;
*)
    echo "usage: $0 tests|engine|text|load|leads|kernels|sweep|stalls|clocks|sustained|gemm|flashinfer|queries|timeline|ratios|profile|fa4-first|fa4" >&2
    exit 2
    ;;
esac
