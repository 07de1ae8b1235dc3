"""Shared by the three libraries' experiments: the samples, the decode, a result line."""
import io, json, os, sys, time
import numpy as np
from PIL import Image

N = int(os.environ.get("CMP_N", 1200))
PER_SHARD = 100


def png(i):
    rng = np.random.default_rng(i)
    base = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
    img = base  # 32x32, compressible like a photo
    buf = io.BytesIO(); Image.fromarray(img).save(buf, format="PNG"); return buf.getvalue()


def samples():
    for i in range(N):
        yield i, png(i), i % 10


def decode(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).transpose(2, 0, 1).astype(np.float32) / 255


def dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try: total += os.path.getsize(os.path.join(root, f))
            except OSError: pass
    return total


def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def run_world(script, args, world, pythonpath, extra_env=None, port=29611):
    """Runs ``script args`` as ``world`` ranks at once (gloo), returns each rank's RESULT dicts."""
    import subprocess
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONPATH=pythonpath + ":" + os.path.dirname(os.path.abspath(__file__)), LITDATA_DISABLE_VERSION_CHECK="1", **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, script, *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        o, e = p.communicate(timeout=600)
        if p.returncode:
            print(e[-3000:], file=sys.stderr)
        results.append([json.loads(l[7:]) for l in o.splitlines() if l.startswith("RESULT ")])
    return results


def init_dist():
    import torch.distributed as dist
    if int(os.environ.get("WORLD_SIZE", 1)) > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")
