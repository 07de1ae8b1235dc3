"""Part of the streaming libraries' comparison (see drive.py)."""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *
import torch
from litdata import StreamingDataset, StreamingDataLoader
from litdata.streaming.writer import BinaryWriter

mode, root = sys.argv[1], sys.argv[2]


class DS(StreamingDataset):
    def __getitem__(self, i):
        s = super().__getitem__(i)
        return s["id"], torch.from_numpy(decode(s["image"])), s["label"]


if mode == "write":
    t = time.perf_counter()
    w = BinaryWriter(root, chunk_size=PER_SHARD)
    for i, img, label in samples():
        w.add_item(i, {"id": i, "image": img, "label": label})
    w.done(); w.merge()
    out(write_s=time.perf_counter() - t, shards=len([f for f in os.listdir(root) if f.endswith(".bin")]), bytes=dir_size(root))
    sys.exit()

init_dist()
if os.environ.get("CMP_REMOTE"):
    import litdata.streaming.downloader as d
    d._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
workers = int(sys.argv[3]); stop = int(sys.argv[4]) if len(sys.argv) > 4 else -1
state_file = sys.argv[5] if len(sys.argv) > 5 else None
remote = os.environ.get("CMP_REMOTE")
local = os.environ.get("CMP_CACHE")
opts = json.loads(os.environ.get("CMP_STORAGE", "{}"))
ds = DS(remote or root, cache_dir=local, shuffle=True, seed=7, drop_last=False,
        max_cache_size=os.environ.get("CMP_CACHE_LIMIT"), storage_options=opts or None)
loader = StreamingDataLoader(ds, batch_size=8, num_workers=workers)
if mode == "resume":
    loader.load_state_dict(json.load(open(state_file)))
read_and_report(loader, remote, local, stop, state_file)
