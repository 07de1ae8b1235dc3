"""Train an object detector: the complete pipeline, ready to run.

    python examples/detection.py                         # digits on 64x64 canvases, on the CPU
    python examples/detection.py --train_images D/train2017 --train_annotations D/annotations/instances_train2017.json \
        --test_images D/val2017 --test_annotations D/annotations/instances_val2017.json
    python examples/detection.py --net_type fasterrcnn_mobilenet_v3_large_320_fpn --input_size 320 320
    python examples/detection.py --distributed --gpu_id 0 1   # 2 GPUs, or 2 CPU processes (gloo)
    python examples/detection.py --resume auto           # continue from work_dir's last.pth
    python examples/detection.py --help

With the default annotation files missing, it generates 1,500 black 64x64 canvases holding 1 to 4 of
the bundled handwritten digits each, at random places and sizes, and writes them to data/digit_scenes
as PNG files and COCO instances.json files, so the real COCO reading path runs without a download.
The default detector, fcos_tiny, reached a test mAP@0.5 of 0.67 after 3 epochs, 154 s of training on a
2-core CPU (bench/RESULTS.md).

The pipeline lives in basetrainer/tasks/detection/: DetectionTrainer (trainer.py) fills in
EngineTrainer's hooks (the COCO loaders with a list collate, the detector, the optimizer, the
callbacks: the losses by name, COCO mAP, checkpoints by mAP), and main() parses the config and starts
the processes with launch(). ``basetrainer train --task detection`` runs the same code.
"""
from basetrainer.tasks.detection import main

if __name__ == "__main__":
    main()
