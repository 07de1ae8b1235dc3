"""Train an image classifier: the complete pipeline, ready to run.

    python examples/example.py                          # the bundled handwritten digits, on the CPU
    python examples/example.py -c configs/config.yaml --train_data D/train --test_data D/val
    python examples/example.py --distributed --gpu_id 0 1    # 2 GPUs, or 2 CPU processes (gloo)
    python examples/example.py --resume auto            # continue from work_dir's last.pth
    python examples/example.py lr=0.01 'milestones=[8,12]'   # any key of configs/config.yaml
    python examples/example.py --help

With the default data folders missing, it writes the handwritten digits (1,797 8x8 images,
10 classes, shipped with basetrainer) to data/digits as PNG files in one folder per class,
so the real ImageFolder loading path runs without a download.

The pipeline lives in basetrainer/tasks/classification/trainer.py: ClassificationTrainer fills
in EngineTrainer's hooks (loaders, model, loss, optimizer, callbacks) and main() parses
the config and starts the processes with launch(). The installed command
``basetrainer train`` runs the same code. To write a trainer for another task, start
from examples/custom_trainer.py.
"""
from basetrainer.tasks.classification import main

if __name__ == "__main__":
    main()
