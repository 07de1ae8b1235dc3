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


def watch_peak(folder):
    """A one-item list that follows the largest size ``folder`` reaches (looked at every 20 ms, in a thread)."""
    import threading
    peak = [0]

    def watch():
        while True:
            peak[0] = max(peak[0], dir_size(folder)); time.sleep(0.02)
    threading.Thread(target=watch, daemon=True).start()
    return peak


def read_and_report(loader, remote, local, stop=-1, state_file=None):
    """Reads ``loader`` (up to batch ``stop``, where rank 0 writes the loader's state to ``state_file``), then
    prints the RESULT line: the ids read, the seconds, the cache's peak and final size (remote data only)."""
    peak = watch_peak(local) if remote is not None else [0]
    ids = []; t = time.perf_counter()
    for b, (i, x, y) in enumerate(loader):
        ids += i.tolist()
        if b + 1 == stop:
            if int(os.environ.get("RANK", 0)) == 0:
                json.dump(loader.state_dict(), open(state_file, "w"))
            break
    dt = time.perf_counter() - t
    out(ids=ids, seconds=dt, peak_cache=peak[0], cache_after=dir_size(local) if remote else 0)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        import torch.distributed
        torch.distributed.barrier()
