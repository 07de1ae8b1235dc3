import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
PACKAGE = (HERE / "basetrainer" / "__init__.py").read_text()
VERSION = re.search(r'__version__ = "([^"]+)"', PACKAGE).group(1)
URL = re.search(r'__url__ = "([^"]*)"', PACKAGE).group(1)  # empty until the project has a public address

# Export to ONNX: torch's exporter (onnx, onnxscript), the check (onnxruntime), simplifying (onnxslim).
ONNX = ["onnx>=1.18", "onnxruntime>=1.20", "onnxscript>=0.5", "onnxslim>=0.1.80"]
# The documentation site (docs/): python -m sphinx -W --keep-going -n -b html docs docs/_build/html
DOCS = ["sphinx>=8.1", "myst-parser>=4", "furo>=2024.8", "sphinx-argparse>=0.5", "sphinx-copybutton>=0.5"]

# The text task: the model (dtype= in from_pretrained: transformers 4.56), LoRA, datasets, tokenizers, weights.
HF = ["transformers>=4.56", "peft>=0.17", "datasets>=3.0", "tokenizers>=0.21", "safetensors>=0.4.3"]

REGION = ('turbojpeg==0.0.2; python_version < "3.14" and (platform_machine == "x86_64" and platform_system == "Linux"'
          ' or platform_machine == "AMD64" and platform_system == "Windows"'
          ' or platform_machine == "arm64" and platform_system == "Darwin" and python_version < "3.13")')

EXTRAS = {
    "plots": [],  # matplotlib is a core dependency now; the extra stays for old install commands
    "prune": ["torch-pruning>=1.4"],
    # NNI's ModelSpeedup works with torch 2.x only up to NNI 2.10.
    "nni": ["nni==2.10.1"],
    "onnx": ONNX,
    # Trackers for LogHistory (loggers: [mlflow, wandb]). The full mlflow, not mlflow-skinny:
    # the default local store is SQLite, which needs mlflow's database layer.
    "mlflow": ["mlflow>=2.9"],
    "wandb": ["wandb>=0.19.10"],  # wandb.init(reinit="create_new")
    "hpo": ["optuna>=3.0"],  # basetrainer.hpo.optuna, examples/hpo.py (NNI's trial API: the nni extra)
    # torchmetrics metrics by name (metrics: [...], MetricsRecorder).
    "metrics": ["torchmetrics>=1.4"],
    # The detection task: COCO mean average precision (pycocotools' COCOeval).
    "detection": ["pycocotools>=2.0.7"],
    "timm": ["timm>=1.0"],  # net_type: timm/<name>
    "nvjpeg": ["torchcodec>=0.16"],  # decoder: nvjpeg, TorchCodec's nvJPEG (torchvision 0.29 deprecates its own)
    # decoder: cpu decodes a random crop's region alone with the libjpeg-turbo 3 library bundled in turbojpeg's
    # wheels (basetrainer.data.images.jpeg_region); only where there are wheels, the whole image decoded elsewhere.
    "region": [REGION],
    # The text task (basetrainer train --task text): pretrained transformers, their tokenizers, datasets, LoRA.
    "hf": HF,
    "ray": ["ray[train]>=2.40"],  # basetrainer.integrations.ray, basetrainer train --ray N
    # fault_tolerance: replica groups, their lighthouse and DiLoCo (the nightly's all-reduce survives a peer's death).
    "torchft": ["torchft-nightly>=2026.10.26"],
    # Streaming shards (basetrainer shards; train_data: s3://...): litdata's format, reader and downloaders. Not
    # MosaicML Streaming: it pins numpy<2.2 and transformers<5 (docs/guides/streaming.md has the comparison).
    "streaming": ["litdata>=0.2.76,<0.3"],
    "docs": DOCS,
    # torch-tb-profiler: the test reads the profiler's trace with TensorBoard's plugin. nni pins
    # filelock<3.12, which torch (any filelock) and the other extras accept.
    # hypothesis: the property-based fuzzing of configs, YAML files and command lines (tests/config, tests/e2e).
    # pytest-xdist: the suite runs one test process per core (-n auto), a file's tests in one of them.
    # psutil: the loader-worker tests count the test process's children.
    # DOCS: tests/docs builds small sites to test the documentation build's own checks.
    # moto[server]: the S3-compatible server the streaming tests start on a local port (no mock of the client).
    "test": ["pytest>=7", "pytest-xdist>=3.5", "hypothesis>=6.100", "psutil>=5.9", "torch-pruning>=1.4", *ONNX, "mlflow>=2.9",
             "wandb>=0.19.10", "optuna>=3.0", "torch-tb-profiler>=0.4", "nni==2.10.1",
             "torchmetrics>=1.4", "pycocotools>=2.0.7", "timm>=1.0", "ray[train]>=2.40",
             "torchft-nightly>=2026.10.26", "litdata>=0.2.76,<0.3", "moto[server]>=5.0", REGION, *DOCS, *HF,
             "accelerate>=1.0", "torchcodec>=0.16"],  # accelerate: HF's Trainer in bench/
}
EXTRAS["all"] = sorted({package for name, packages in EXTRAS.items() if name not in ("test", "docs") for package in packages})

setup(
    name="basetrainer",
    version=VERSION,
    description="A PyTorch training engine: one subclass, any number of GPUs or machines, exact resume.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    **({"url": URL, "project_urls": {"Source": URL, "Issues": f"{URL}/issues"}} if URL else {}),
    python_requires=">=3.9",
    packages=find_packages(include=["basetrainer", "basetrainer.*"]),
    package_data={"basetrainer": ["data/*.csv.gz", "data/NOTICE"]},
    install_requires=[
        "torch>=2.1",
        "torchvision>=0.16",
        "matplotlib>=3.5",  # the confusion-matrix and training-curves pictures
        "numpy",
        "pillow",
        "pyyaml>=5.1",
        "simplejpeg>=1.6",  # decoder: cpu, libjpeg-turbo's TurboJPEG API (wheels for Linux, macOS and Windows)
        "tensorboard>=2.10",
        "tqdm>=4.60",
    ],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["basetrainer=basetrainer.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
