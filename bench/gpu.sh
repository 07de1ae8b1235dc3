# The GPU checks and figures, in one go, on a machine with one NVIDIA GPU (bench/RESULTS.md holds the figures):
#
#     bash bench/gpu.sh [OUT_DIR]
#
# 1. the GPU tests (tests/parallel/test_gpu.py: CUDA, fp16/bf16 AMP, channels_last, compile, FSDP2 on NCCL);
# 2. bench/overhead.py on the GPU: a small model (the host sets the pace) and a larger one (the GPU does);
# 3. the quick start on the GPU: fp32, then bf16 AMP with channels_last, then torch.compile;
# 4. the language-model example on the GPU;
# 5. the quick start with 0 and 8 loader workers (bench/loader_workers.py): samples/s and data wait of each, and
#    a failure when a run exits more than 2 s after its last log line (a loader worker outliving the training:
#    5 s per worker before issue 44, 45 s with 8);
# 6. issue 53: ResNet-50 bf16 on a folder of photograph-sized JPEGs (the photo-like digits drawn 4 times) with the
#    default decoder and workers, and with decoder nvjpeg, against synthetic batches already on the GPU (goals:
#    within 5%, data wait under 10%: bench/gpu_images.py); then the image loaders alone at 224, nvjpeg included
#    (bench/input_pipeline.py). The GPU tests of step 1 include the decoders' (tests/data/images).
# Each step has its own time limit, so that one that hangs does not take the others' time. Logs go to OUT_DIR.
set -u
out=${1:-gpu-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: runs COMMAND, its output to the screen and to OUT_DIR/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "=== $name: $*"
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$out/$name.log"
    echo "=== $name: exit $rc, $((SECONDS - start)) s"
}
nvidia-smi -L
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
step gpu_tests 150 python3 -m pytest -q -p no:cacheprovider -rs tests/parallel/test_gpu.py tests/data/images
step overhead_small 60 python3 bench/overhead.py --device cuda --rounds 3 --no-plot
step overhead_large 150 python3 bench/overhead.py --device cuda --rounds 2 --no-plot --features 2048 --width 4096 \
    --batch 2048
work=$(mktemp -d)
step example_fp32 70 python3 examples/example.py progress=false work_dir="$work/fp32"
step example_bf16_channels_last 70 python3 examples/example.py progress=false amp=bf16 channels_last=true \
    work_dir="$work/bf16"
step example_compile 100 python3 examples/example.py progress=false compile=true work_dir="$work/compile"
step language_model 60 python3 examples/language_model.py progress=false work_dir="$work/lm"
step loader_workers 240 python3 bench/loader_workers.py --workers 0 8 --epochs 12 --rounds 1 --max-exit-seconds 2
step images_resnet50 420 python3 bench/gpu_images.py --batch-size 256 --max-iters 120 --repeats 4
step input_pipeline 300 python3 bench/input_pipeline.py --root data/photo_digits_x1 --rounds 1 --workers 0 8 \
    --train-steps 5 --train-batch-size 128
