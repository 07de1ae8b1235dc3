"""Inference as users of the earlier library wrote it: the model files a training run saved, each loaded
with plain ``torch.load`` and ``model.load_state_dict`` into the network built afresh, then run on images::

    python tests/compat/old_inference_script.py --data D/val --model_dirs W1/model W2/model \
        --net_type mobilenet_v2 --input_size 16 16

prints one JSON line: for each model folder, the accuracy in % on ``--data`` of its ``best_model_*.pth``
and of its ``latest_model_*.pth``, by file name.
"""
import argparse
import glob
import json
import os

import torch
from torchvision import transforms
from torchvision.datasets import ImageFolder

from basetrainer.models import build_models


def load_model(model_file, net_type, input_size, num_classes):
    model = build_models.get_models(net_type=net_type, input_size=input_size, num_classes=num_classes,
                                    pretrained=False)
    state_dict = torch.load(model_file, map_location="cpu")
    model.load_state_dict(state_dict)
    model.eval()
    return model


def accuracy(model, dataset):
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=False)
    correct = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += (model(images).argmax(dim=1) == labels).sum().item()
    return 100.0 * correct / len(dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--model_dirs", nargs="+", required=True)
    parser.add_argument("--net_type", default="mobilenet_v2")
    parser.add_argument("--input_size", nargs=2, type=int, default=[16, 16])
    args = parser.parse_args()
    transform = transforms.Compose([transforms.Resize(args.input_size), transforms.ToTensor(),
                                    transforms.Normalize([0.5] * 3, [0.5] * 3)])
    dataset = ImageFolder(root=args.data, transform=transform)
    results = {}
    for model_dir in args.model_dirs:
        files = glob.glob(os.path.join(model_dir, "best_model_*.pth")) + \
            glob.glob(os.path.join(model_dir, "latest_model_*.pth"))
        results[model_dir] = {os.path.basename(path): accuracy(load_model(path, args.net_type, args.input_size,
                                                                          len(dataset.classes)), dataset)
                              for path in files}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
