# The batch-size study on the bundled digits (bench/RESULTS.md, "Batch size and time to accuracy"):
#
#     bash bench/study_digits.sh [OUT_DIR]
#
# One run of examples/example.py's defaults (ResNet-18 at 32x32, SGD, lr 0.05 chosen at batch 64, cosine with one
# epoch of warm-up, 12 epochs, seed 2020) per batch size, 16 to 512, in one process on the CPU each, with the lr
# scaled linearly from 64 and the time to 98% test accuracy (Acc: the 359 validation images). It runs in OUT_DIR
# (default study-digits): the digits are written to OUT_DIR/data/digits on the first run, the study to
# OUT_DIR/study (study.csv, study.md, study.png, run_bs<N>/). Started again, it continues with the runs left.
set -eu
out=${1:-study-digits}
mkdir -p "$out"
cd "$out"
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
python3 -m basetrainer study --batch-sizes 16 32 64 128 256 512 --rule linear --base-batch-size 64 \
    --target-metric Acc --target-value 98 --out study
cat study/study.md
