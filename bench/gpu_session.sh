#!/usr/bin/env bash
# One device call on a lent H200: the GPU tests or one benchmark mode, with the reports
# written under $OUT (copy them to bench/results/ afterwards).
#
#   bench/gpu_session.sh tests       # the GPU tests, rerankers' last (about 6 minutes)
#   bench/gpu_session.sh engine      # gpu_bench, then Engine.embed on text against the engine on ids (embed_pipeline)
#   bench/gpu_session.sh paragraphs  # the load generator's many-client pattern with default flags: BERT-base,
#                                    # the Qwen3-0.6B shape and MiniLM on paragraphs, 8 client processes x 12
#                                    # connections, against the engine alone (bench/results/http/e2e-gpu-*.md;
#                                    # about 4.5 minutes)
#   bench/gpu_session.sh bulk        # the load generator's bulk pattern with default flags: 1, 2, 4 and 8 clients
#                                    # sending 1,000- and 100-text requests back to back, MiniLM and BERT-base
#                                    # (bench/results/http/bulk-gpu-*.md; about 5 minutes)
#   bench/gpu_session.sh bulk1000    # the same for 1,000-text requests alone, 1 and 4 clients, three rounds
#                                    # (bench/results/http/bulk-gpu-*-1000.md; about 3 minutes)
#   bench/gpu_session.sh http-guard  # the many-client and bulk patterns on BERT-base, uvicorn's protocol against the
#                                    # HTTP guard (bench/results/http/http-guard-gpu.md gathers them)
#   bench/gpu_session.sh mixed       # search queries beside 1,000-text requests (bench/lib/mixed.py), MiniLM and BERT-base,
#                                    # the default flags against --scheduling fcfs (bench/results/http/mixed-gpu-*.md)
#   bench/gpu_session.sh mixed-qwen3 # the same on the Qwen3-0.6B shape with 500-token documents
#   bench/gpu_session.sh kernels     # the attention's GPU tests, then each pass of a layer against its
#                                    # hardware floor, warm and cold (bench/kernel_floors.py)
#   bench/gpu_session.sh sweep       # the packed attention's GPU tests, then its launches swept around the
#                                    # defaults (bench/probes/attention_tiles.py, about 3 minutes)
#   bench/gpu_session.sh flashinfer  # FlashInfer's tests, then gpu_bench with varlen, packed and FlashInfer side
#                                    # by side; carry .whl-fi alone, after a call that brought .whl and .carry
#   bench/gpu_session.sh ratios      # gpu_bench alone: ours against the dense ceiling and Hugging Face
#   bench/gpu_session.sh queries     # MiniLM's queries/docs, 32,768 queries against 4,096, twice each (3 minutes)
#   bench/gpu_session.sh sustained   # gpu_bench on the default backend, bursts and 5 s back to back (the power limit)
#   bench/gpu_session.sh rerank      # bench/rerank.py with default flags: a BERT-base-shaped cross-encoder, one query
#                                    # with 100 documents of 200 tokens, rerank against embeddings under many clients,
#                                    # both models in one server (bench/results/http/rerank-gpu.md; about 4 minutes)
#   bench/gpu_session.sh profile     # kernel by kernel with the packed attention (bench/gpu_profile.py), and
#                                    # py-spy over the server under load (BERT-base paragraphs and documents)
#   bench/gpu_session.sh fp8-tests   # FP8's GPU tests (kernels, the GEMM, engines against the CPU simulation),
#                                    # then the fused kernels' and Qwen3's GPU tests on the bf16 path (about 4 minutes)
#   bench/gpu_session.sh fp8         # bench/fp8_bench.py: bf16 against FP8 plans on MiniLM, BERT-base and the
#                                    # Qwen3-0.6B shape, engine alone on documents, dense ceilings, quality (bench/results/fp8/fp8.md)
#   bench/gpu_session.sh fp8-4b      # the same on the Qwen3-Embedding-4B shape (bench/results/fp8/fp8-4b.md)
#   bench/gpu_session.sh fp8-plans   # fp8_bench.py on the models and plans in $MODELS and $PLANS (bench/results/fp8/fp8-plans*.md)
#   bench/gpu_session.sh fp8-probe   # FP8 GEMM scalings one linear at a time (rowwise against 1x128 blockwise;
#                                    # bench/results/fp8/fp8-scaling-probe.md), then where an FP8 batch's time goes,
#                                    # kernel by kernel (bench/results/gpu/gpu-profile-fp8.md)
#   bench/gpu_session.sh fp8-gemm    # the BERT family's MLP with its up projection quantizing its own output
#                                    # (bench/probes/fp8_gemm_epilogue.py), the GEMMs' GPU tests ($TESTS: pytest -k), then
#                                    # fp8_bench on BERT-base's plans ($PLANS)
#   bench/gpu_session.sh fp8-bert    # the up projection at one scale per operand against its reference, the engines
#                                    # against their CPU simulation ($TESTS), then fp8_bench on BERT-base's plans
#                                    # ($PLANS; default against default+rows-up; about 5 minutes)
#   bench/gpu_session.sh fp8-lt      # cuBLASLt's FP8 GEMM with GELU in its epilogue on BERT-base's up projection
#                                    # (bench/probes/fp8_cublaslt.py, bench/results/fp8/fp8-cublaslt*.md; under a minute)
#   bench/gpu_session.sh fp8-rows    # the FP8 row kernels' launches against the memory's speed
#                                    # (bench/probes/fp8_row_kernels.py, bench/results/fp8/fp8-row-kernels.md; about a minute)
#   bench/gpu_session.sh fp8-paragraphs  # the paragraphs mode's load with --quantization fp8, BERT-base and the
#                                    # Qwen3-0.6B shape, against the FP8 engine alone (bench/results/http/e2e-gpu-*-fp8.md)
#   bench/gpu_session.sh fp8-bulk    # the bulk pattern with --quantization fp8: 1,000-text requests from 1 and 4
#                                    # clients, BERT-base and the Qwen3-0.6B shape (bench/results/http/bulk-gpu-*-fp8.md)
#   bench/gpu_session.sh heads       # the sparse, ColBERT and BGE-M3 GPU tests (and any classifiers'), then bench/heads.py:
#                                    # the engine alone on the same documents, dense, SPLADE, a classifier and ColBERT
#                                    # on BERT-base, BGE-M3 dense-only against all three outputs on XLM-R large
#                                    # (bench/results/gpu/heads-bert-base.md; set ROSE_EMBED_COMMIT to name the commit;
#                                    # about 7 minutes by estimate, not yet timed: the tests 2 to 3, the BERT-base
#                                    # heads under 2, BGE-M3's 2 to 3, most of it writing and loading its 2.2 GB)
#   bench/gpu_session.sh heads-http  # bench/heads.py --http: SPLADE (/embed_sparse) and ColBERT (documents) on BERT-base
#                                    # through the server to 96 clients in 8 processes, against the engine alone
#                                    # (bench/results/http/http-heads-gpu.md; about 5 minutes by estimate, not yet timed)
#   bench/gpu_session.sh sparse-parts # the fused kernels' and the sparse head's GPU tests, then where a SPLADE batch's
#                                    # head time goes, part by part (bench/probes/sparse_head_parts.py; about 2 minutes)
#   bench/gpu_session.sh images      # CLIP's GPU tests (the vision tower in CUDA graphs against transformers), then
#                                    # bench/images.py: ViT-B/16 and ViT-L/14 shapes, the engine alone against
#                                    # get_image_features in bf16 (bench/results/gpu/images.md), then the same shapes
#                                    # served with default flags to 64 clients in 4 processes sending base64 640x480
#                                    # JPEGs, against the engine alone, with the front ends' CPU, two rounds each
#                                    # (--http; bench/results/http/http-images-gpu.md); set ROSE_EMBED_COMMIT to name
#                                    # the commit; about 6 minutes by estimate, not yet timed
#   bench/gpu_session.sh budget      # a batch's time and speed against its token budget (bench/probes/gpu_batch_budget.py)
#
# A device call runs at most 10 minutes: one mode per call.
#
# Needs what docs/gpu-runs.md's recipe puts in the git-ignored folders named in the call's carry:
# .whl/ (wheels) and .carry/minilm + .carry/pkgs (the default model's tokenizer files and
# a stand-in package). Each step's exit status is printed; a failing step does not stop the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
# FlashInfer's wheel travels alone, in a call after one that brought .whl/ (docs/gpu-runs.md).
[ -d .whl-fi ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl-fi/*.whl >/dev/null 2>&1
# The checkout itself is not installed: run from its root, it imports as rose_embed (rose_embed/__init__.py
# reaches server/, engine/, compat/ and corpus/ from there; docs/gpu-runs.md).
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

models() {  # random weights of the benchmark shapes (bench/tiny_model.py), under /tmp/<shape>-random
    local shape shapes=("$@")
    [ $# -eq 0 ] && shapes=(minilm bert-base qwen3)
    for shape in "${shapes[@]}"; do
        [ -d "/tmp/$shape-random" ] && continue
        case $shape in
        minilm) python3 bench/tiny_model.py /tmp/minilm-random --hidden 384 --layers 6 --heads 12 --source .carry/minilm ;;
        bert-base) python3 bench/tiny_model.py /tmp/bert-base-random --hidden 768 --layers 12 --source .carry/minilm ;;
        bert-base-ce) python3 bench/tiny_model.py /tmp/bert-base-ce-random --arch bert-cross-encoder --hidden 768 \
            --layers 12 --source .carry/minilm ;;
        qwen3) python3 bench/tiny_model.py /tmp/qwen3-random --arch qwen3-0.6b --source .carry/minilm ;;
        esac
    done >/tmp/models.log 2>&1
}

load_gen() {  # report name, model, extra flags...: the many-client pattern, lean clients in 8 processes
    local name=$1 model=$2
    shift 2
    step "$name" python3 bench/load_gen.py --device cuda --clients 96 --procs 8 --rounds 3 --no-st \
        --model "$model" --out "$OUT/$name.md" "$@"
}

bulk() {  # report name, model, [request sizes, client counts, rounds]: the bulk pattern
    step "$1" python3 bench/load_gen.py --pattern bulk --device cuda --model "$2" --num-texts 12000 \
        --request-texts "${3:-1000,100}" --bulk-clients "${4:-1,2,4,8}" --window 4 --warmup 1 --rounds "${5:-2}" \
        --out "$OUT/$1.md" "${@:6}"
}

case "${1:-tests}" in
tests)
    KEEP_LOGS=1 step gpu-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
        tests/gpu/test_gpu.py tests/gpu/test_gpu_capture.py tests/gpu/test_gpu_stress.py tests/gpu/test_qwen3_gpu.py \
        tests/gpu/test_fused_gpu.py tests/gpu/test_architectures_gpu.py tests/gpu/test_packed_attention_gpu.py \
        tests/models/test_st_modules.py tests/gpu/test_contextualized_gpu.py tests/gpu/test_long_inputs_devices.py \
        tests/gpu/test_bge_m3_gpu.py
    # Rerankers in a step of their own: their server of four models captures its graphs at start.
    KEEP_LOGS=1 step rerank-gpu-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_rerank_gpu.py
    ;;
engine)
    models minilm
    step gpu-bench python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --gelu-both \
        --out "$OUT/gpu.md"
    step embed-pipeline python3 bench/embed_pipeline.py --model /tmp/minilm-random --device cuda --rounds 5 \
        --threads 0 --processes 4,8 --process-pieces 256 --out "$OUT/embed-pipeline-gpu-minilm.md"
    ;;
paragraphs)
    # Each round long enough for a steady window of ten request latencies in every round:
    # MiniLM's rounds are short, the Qwen3 shape's requests slow (200 ms at 96 clients).
    models
    load_gen e2e-gpu-bert-base /tmp/bert-base-random --num-texts 12061 --repeat 4 --latency-queries 200
    load_gen e2e-gpu-qwen3 /tmp/qwen3-random --num-texts 12061 --repeat 8 --latency-queries 200
    load_gen e2e-gpu-minilm /tmp/minilm-random --num-texts 12061 --repeat 16 --latency-queries 200
    ;;
bulk)
    models minilm bert-base
    bulk bulk-gpu-minilm /tmp/minilm-random
    bulk bulk-gpu-bert-base /tmp/bert-base-random
    ;;
bulk1000)
    # What the bulk targets read: 1,000-text requests from 1 and from 4 clients, three rounds;
    # with PROFILE set (and py-spy's wheel in .whl/), py-spy over the server while one client sends.
    models minilm bert-base
    export PATH=/tmp/site/bin:$PATH
    for shape in minilm bert-base; do
        bulk "bulk-gpu-$shape-1000" "/tmp/$shape-random" 1000 1,4 3 ${PROFILE:+--py-spy "$OUT/bulk-$shape.pyspy.txt"}
    done
    ;;
http-guard)
    # What the HTTP guard (server/http/guarded_http.py) costs: the many-client and the bulk patterns on BERT-base with
    # uvicorn's own protocol (the hidden --http-protocol plain) and with the guard, one after the other (about 6 minutes).
    models bert-base
    for protocol in plain guarded; do
        load_gen "http-$protocol-many" /tmp/bert-base-random --num-texts 12061 --repeat 4 --rounds 2 --latency-queries 0 \
            --server-arg=--http-protocol=$protocol
        bulk "http-$protocol-bulk" /tmp/bert-base-random 1000 1,4 2 --server-arg=--http-protocol=$protocol
    done
    ;;
mixed)
    # Search queries beside an indexing job (bench/lib/mixed.py): 8 query connections, 1 and 4 clients sending
    # 1,000-text requests, the default flags against --scheduling fcfs, MiniLM and BERT-base (about 9 minutes:
    # a call has room for two rounds).
    models minilm bert-base
    for shape in minilm bert-base; do
        step "mixed-gpu-$shape" python3 bench/load_gen.py --pattern mixed --device cuda --model "/tmp/$shape-random" \
            --num-texts 12000 --request-texts 1000 --bulk-clients 1,4 --window 6 --warmup 2 --rounds "${ROUNDS:-2}" \
            --out "$OUT/mixed-gpu-$shape.md"
    done
    ;;
mixed-qwen3)
    # The same on the Qwen3-0.6B shape with documents of about 500 tokens, 500 a request (about 5 minutes a round).
    models qwen3
    python3 -c "import json, pathlib; p = pathlib.Path('/tmp/qwen3-random/sentence_bert_config.json'); \
c = json.loads(p.read_text()); c['max_seq_length'] = 1024; p.write_text(json.dumps(c))"
    step mixed-gpu-qwen3 python3 bench/load_gen.py --pattern mixed --device cuda --model /tmp/qwen3-random \
        --num-texts 800 --join 15 --repeat 3 --request-texts 500 --bulk-clients 1,4 --window 8 --warmup 3 \
        --rounds "${ROUNDS:-1}" --out "$OUT/mixed-gpu-qwen3.md"
    ;;
kernels)
    KEEP_LOGS=1 step attention-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu \
        tests/gpu/test_packed_attention_gpu.py tests/gpu/test_qwen3_gpu.py tests/gpu/test_architectures_gpu.py
    step kernel-floors python3 bench/kernel_floors.py --out "$OUT/kernel-floors.md"
    step kernel-floors-cold python3 bench/kernel_floors.py --cold --out "$OUT/kernel-floors-cold.md"
    ;;
sweep)
    KEEP_LOGS=1 step attention-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_packed_attention_gpu.py \
        tests/gpu/test_fused_gpu.py -k "kernel_matches or graph or auto_chooses or biased"
    step attention-tiles python3 bench/probes/attention_tiles.py --models bert-base,qwen3-0.6b,minilm --around-default \
        --stages 3 --max-registers none,128 --fold-scale both --tma-loads both --out "$OUT/attention-tiles-around-defaults.md"
    ;;
flashinfer)
    # Carry .whl-fi alone, after a call that carried .whl and .carry, on the same warm machine.
    python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)"
    KEEP_LOGS=1 step flashinfer-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_gpu.py \
        tests/gpu/test_qwen3_gpu.py tests/gpu/test_contextualized_gpu.py -k flashinfer
    step gpu-bench-flashinfer python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json \
        --models bert-base,qwen3-0.6b --backends varlen,packed,flashinfer --out "$OUT/gpu-flashinfer.md"
    ;;
ratios)
    step gpu-bench python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --gelu-both --sustained 5 \
        --out "$OUT/gpu.md"
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
sustained)
    # The default backend only, each model's docs and its ceiling also timed for 5 s back to back.
    step gpu-bench python3 bench/gpu_bench.py --tokenizer .carry/minilm/tokenizer.json --backends auto \
        --sustained 5 --out "$OUT/gpu-sustained.md"
    grep -A 6 "^## Sustained" "$OUT/gpu-sustained.md"
    ;;
rerank)
    # The mixed load is one connection per model: each alone fills well under half the device, so
    # together they fit, and what each loses is what sharing the server costs, not the device.
    # (At 16 connections per model each alone fills the device and together each gets about half.)
    models bert-base bert-base-ce
    step rerank python3 bench/rerank.py --embedder /tmp/bert-base-random --reranker /tmp/bert-base-ce-random \
        --device cuda --latency-requests 200 --clients 64 --procs 8 --mixed-clients 1 --mixed-procs 1 --window 6 \
        --out "$OUT/rerank-gpu.md"
    ;;
profile)
    models bert-base
    export PATH=/tmp/site/bin:$PATH  # py-spy, from its wheel in .whl/
    step gpu-profile python3 bench/gpu_profile.py --backend packed --out "$OUT/gpu-profile-packed.md"
    load_gen e2e-gpu-bert-base-profiled /tmp/bert-base-random --num-texts 12061 --repeat 4 \
        --latency-queries 0 --py-spy "$OUT/e2e-gpu-bert-base.pyspy.txt"
    load_gen e2e-gpu-bert-base-docs /tmp/bert-base-random --num-texts 3000 --join 4 --repeat 4 --latency-queries 0
    ;;
fp8-tests)
    KEEP_LOGS=1 step fp8-gpu-tests python3 -m pytest -q -rs -s -p no:cacheprovider -m gpu tests/gpu/test_fp8_gpu.py
    # The measured figures the tests print, one line each.
    grep -E "accumulation: largest|engine vs its simulation|all-MiniLM-L6-v2 FP8" /tmp/step-logs/fp8-gpu-tests.log
    KEEP_LOGS=1 step bf16-gpu-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_fused_gpu.py \
        tests/gpu/test_qwen3_gpu.py tests/gpu/test_gpu_capture.py
    ;;
fp8-gemm)
    models bert-base
    step fp8-gemm-epilogue python3 bench/probes/fp8_gemm_epilogue.py --out "$OUT/fp8-gemm-epilogue.md"
    KEEP_LOGS=1 step fp8-gemm-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_fp8_gpu.py \
        -k "${TESTS:-bounded or scaled_mm}"
    step fp8-bench-bert python3 bench/fp8_bench.py --tokenizer .carry/minilm/tokenizer.json --models bert-base \
        --plans ${PLANS:-default,every} --out "$OUT/fp8-plans-bert-base.md"
    ;;
fp8-bert)
    # The up projection at one scale per operand (cuBLASLt's epilogue) against its reference and the
    # engines against their simulation ($TESTS: pytest -k), then fp8_bench on BERT-base's plans ($PLANS).
    KEEP_LOGS=1 step fp8-bert-tests python3 -m pytest -q -rs -s -p no:cacheprovider -m gpu tests/gpu/test_fp8_gpu.py \
        -k "${TESTS:-one_scale or engine_is_its_cpu or pooled_tokens_kept or scaled_mm}"
    grep -E "engine vs its simulation|all-MiniLM-L6-v2 FP8" /tmp/step-logs/fp8-bert-tests.log
    step fp8-bench-bert python3 bench/fp8_bench.py --tokenizer .carry/minilm/tokenizer.json --models bert-base \
        --plans "${PLANS:-default,default+rows-up}" --out "$OUT/fp8-plans-bert-base.md"
    sed -n '/^| model/,$p' "$OUT/fp8-plans-bert-base.md"
    ;;
fp8-lt)
    step fp8-cublaslt python3 bench/probes/fp8_cublaslt.py --out "$OUT/fp8-cublaslt.md"
    cat "$OUT/fp8-cublaslt.md"
    ;;
fp8-rows)
    step fp8-row-kernels python3 bench/probes/fp8_row_kernels.py --out "$OUT/fp8-row-kernels.md"
    ;;
fp8)
    step fp8-bench python3 bench/fp8_bench.py --tokenizer .carry/minilm/tokenizer.json \
        --models minilm,bert-base,qwen3-0.6b --out "$OUT/fp8.md"
    sed -n '/^| model/,$p' "$OUT/fp8.md"
    ;;
fp8-4b)
    step fp8-bench-4b python3 bench/fp8_bench.py --tokenizer .carry/minilm/tokenizer.json --models qwen3-4b \
        --out "$OUT/fp8-4b.md"
    sed -n '/^| model/,$p' "$OUT/fp8-4b.md"
    ;;
fp8-plans)
    # MODELS and PLANS as fp8_bench.py's --models and --plans, e.g. MODELS=qwen3-4b
    # PLANS=first4-last0,first6-last0,first8-last0 (a 4B plan takes about a minute).
    step fp8-plans python3 bench/fp8_bench.py --tokenizer .carry/minilm/tokenizer.json --models "$MODELS" \
        --plans "$PLANS" --out "$OUT/fp8-plans.md"
    sed -n '/^| model/,$p' "$OUT/fp8-plans.md"
    ;;
cublas-workspace)
    step cublas-workspace python3 bench/probes/cublas_workspace.py --models "${MODELS:-bert-base,qwen3-0.6b}" --out "$OUT/cublas-workspace.md"
    ;;
fp8-algos)
    step fp8-gemm-algos python3 bench/probes/fp8_gemm_algos.py --out "$OUT/fp8-gemm-algos.md"
    ;;
fp8-probe)
    step fp8-scaling-probe python3 bench/probes/fp8_scaling_probe.py --out "$OUT/fp8-scaling-probe.md"
    step gpu-profile-fp8 python3 bench/gpu_profile.py --backend packed --models qwen3-0.6b,bert-base --fp8-plan every \
        --out "$OUT/gpu-profile-fp8.md"
    ;;
fp8-paragraphs)
    models bert-base qwen3
    load_gen e2e-gpu-bert-base-fp8 /tmp/bert-base-random --num-texts 12061 --repeat 4 --latency-queries 200 \
        --quantization fp8
    load_gen e2e-gpu-qwen3-fp8 /tmp/qwen3-random --num-texts 12061 --repeat 8 --latency-queries 200 --quantization fp8
    ;;
fp8-bulk)
    # The bulk pattern with --quantization fp8: 1,000-text requests from 1 and from 4 clients, two rounds.
    models bert-base qwen3
    bulk bulk-gpu-bert-base-fp8 /tmp/bert-base-random 1000 1,4 2 --quantization fp8
    bulk bulk-gpu-qwen3-fp8 /tmp/qwen3-random 1000 1,4 2 --quantization fp8
    ;;
heads)
    # Classifiers have no GPU tests yet: the glob takes tests/gpu/test_classif*_gpu.py once they come.
    shopt -s nullglob
    KEEP_LOGS=1 step heads-gpu-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_sparse_gpu.py \
        tests/gpu/test_colbert_gpu.py tests/gpu/test_colbert_rerank_gpu.py tests/gpu/test_bge_m3_gpu.py tests/gpu/test_classif*_gpu.py \
        tests/gpu/test_colbert_hidden_expansion_gpu.py tests/gpu/test_fused_gpu.py
    shopt -u nullglob
    step heads-bert-base python3 bench/heads.py --shape bert-base --device cuda --source .carry/minilm \
        --out "$OUT/heads-bert-base.md"
    sed -n '/^| arm | engine/,$p' "$OUT/heads-bert-base.md"
    ;;
heads-http)
    # BGE-M3 all three outputs over HTTP is left out: 8 KB of answer per token, a round's bodies run to gigabytes
    # (--http bge-m3 measures it, with fewer --http-texts).
    step heads-http python3 bench/heads.py --heads none --http sparse,colbert --shape bert-base --device cuda \
        --source .carry/minilm --http-clients 96 --http-procs 8 --http-rounds 3 --out "$OUT/http-heads-gpu.md"
    sed -n '/^| head | route/,$p' "$OUT/http-heads-gpu.md"
    ;;
sparse-parts)
    KEEP_LOGS=1 step sparse-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_fused_gpu.py \
        tests/gpu/test_sparse_gpu.py
    step sparse-head-parts python3 bench/probes/sparse_head_parts.py
    cat /tmp/step-logs/sparse-head-parts.log
    ;;
images)
    KEEP_LOGS=1 step clip-gpu-tests python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/gpu/test_clip_gpu.py
    step images python3 bench/images.py --device cuda --out "$OUT/images.md"
    sed -n '/^| shape | tokens/,$p' "$OUT/images.md"
    df -h /dev/shm | tail -1  # the front ends' arenas hold images' pixels (docs/images.md, shared memory)
    step images-http python3 bench/images.py --device cuda --shapes none --http b16,l14 --http-rounds 2 \
        --out "$OUT/http-images-gpu.md"
    sed -n '/^| shape | dtype | images a round/,$p' "$OUT/http-images-gpu.md"
    ;;
budget)
    # A batch's time and speed against its token budget, MiniLM, BERT-base and the Qwen3-0.6B shape
    # (bench/probes/gpu_batch_budget.py; about 3 minutes): what the warm-up's choice of a budget reads.
    models
    python3 -c "import json, pathlib; p = pathlib.Path('/tmp/qwen3-random/sentence_bert_config.json'); \
c = json.loads(p.read_text()); c['max_seq_length'] = 1024; p.write_text(json.dumps(c))"
    KEEP_LOGS=1 step gpu-batch-budget python3 bench/probes/gpu_batch_budget.py \
        --models "${MODELS:-/tmp/qwen3-random,/tmp/bert-base-random,/tmp/minilm-random}"
    grep -v "^Writing" /tmp/step-logs/gpu-batch-budget.log
    ;;
*)
    echo "usage: $0 tests|engine|paragraphs|bulk|bulk1000|kernels|sweep|flashinfer|ratios|queries|sustained|rerank|profile|fp8-tests|fp8|fp8-4b|fp8-plans|fp8-algos|cublas-workspace|fp8-probe|fp8-gemm|fp8-bert|fp8-lt|fp8-rows|fp8-paragraphs|fp8-bulk|heads|heads-http|sparse-parts|budget" >&2
    exit 2
    ;;
esac
