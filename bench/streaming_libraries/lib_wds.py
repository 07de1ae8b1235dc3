"""Part of the streaming libraries' comparison (see drive.py)."""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import torch
import webdataset as wds

mode, root = sys.argv[1], sys.argv[2]

if mode == "write":
    os.makedirs(root, exist_ok=True)
    t = time.perf_counter()
    with wds.ShardWriter(os.path.join(root, "shard-%06d.tar"), maxcount=PER_SHARD, verbose=0) as w:
        for i, img, label in samples():
            w.write({"__key__": f"{i:08d}", "png": img, "cls": label, "id": i})
    out(write_s=time.perf_counter() - t, shards=len(os.listdir(root)), bytes=dir_size(root))
    sys.exit()

init_dist()
workers = int(sys.argv[3]); stop = int(sys.argv[4]) if len(sys.argv) > 4 else -1
remote = os.environ.get("CMP_REMOTE")
shards = sorted(os.listdir(root))
urls = [f"{remote}/{s}" if remote else os.path.join(root, s) for s in shards]
local = os.environ.get("CMP_CACHE")
limit = int(os.environ.get("CMP_CACHE_LIMIT_BYTES", -1))
ds = (wds.WebDataset(urls, shardshuffle=7, nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker,
                     cache_dir=local, cache_size=limit, empty_check=False)
      .shuffle(100, rng=__import__("random").Random(7))
      .map(lambda s: (int(s["id"]), torch.from_numpy(decode(s["png"])), int(s["cls"]))))
loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=workers)
read_and_report(loader, remote, local)
