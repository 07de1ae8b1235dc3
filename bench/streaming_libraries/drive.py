"""The comparison of MosaicML Streaming (mds), litdata (lit) and WebDataset (wds) behind docs/guides/streaming.md:
``python drive.py LIB SCENARIO``, each library from a folder of its own (MosaicML Streaming cannot be installed
beside the project's extras: it pins numpy<2.2, xxhash<4 and transformers<5)::

    pip install --target /tmp/eval-mds --no-deps mosaicml-streaming "numpy<2.2" "xxhash<4" zstd python-snappy \
        cramjam brotli catalogue "transformers<5" "huggingface_hub<1" "tokenizers==0.22.2" regex safetensors
    pip install --target /tmp/eval-lit --no-deps litdata obstore tifffile
    pip install --target /tmp/eval-wds --no-deps webdataset braceexpand
    for lib in mds lit wds; do CMP_N=1210 PYTHONPATH=/tmp/eval-$lib python lib_$lib.py write /tmp/cmp/$lib; done
    python drive.py mds partition      # then resume, elastic, throughput, ranks; for each of mds, lit, wds

``remote`` reads the shards of mds and lit from ``s3://cmp/<lib>`` on moto's server (``moto_server -p 5055``,
the folders uploaded there) and those of wds over HTTP (``python -m http.server 5056`` in /tmp/cmp/wds); with
``LIMIT=1MB`` (and ``LIMIT_BYTES``) under a cache limit. litdata's chunk path (obstore) refuses an http endpoint:
lib_lit.py allows it for the experiment. Each line printed is one finding of the guide's table.
"""
import collections, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import run_world, N
lib, scenario = sys.argv[1], sys.argv[2]
paths = {"mds": "/tmp/eval-mds", "lit": "/tmp/eval-lit", "wds": "/tmp/eval-wds"}
script, pp, root = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"lib_{lib}.py"), paths[lib], f"/tmp/cmp/{lib}"
N = int(os.environ.get("CMP_N", 1210))
state = f"/tmp/cmp/{lib}-state.json"


def clean():
    if lib == "mds":
        import subprocess
        subprocess.run([sys.executable, "-c", "from streaming.base.util import clean_stale_shared_memory as c; c()"],
                       env=dict(os.environ, PYTHONPATH=pp), check=False, capture_output=True)


_run = run_world
def run_world(*a, **k):
    clean()
    return _run(*a, **k)


def ids(results):
    return [r[-1]["ids"] for r in results]


def check(all_ids, label):
    c = collections.Counter(all_ids)
    dup = sum(v - 1 for v in c.values() if v > 1)
    gap = N - len(c)
    print(json.dumps({"lib": lib, "check": label, "samples": len(all_ids), "duplicates": dup, "missing": gap}))


if scenario == "partition":
    for world, workers in ((1, 2), (2, 2), (3, 2)):
        res = ids(run_world(script, ["epoch", root, str(workers)], world, pp))
        check([i for r in res for i in r], f"one epoch, {world} rank(s) x {workers} workers")
elif scenario == "resume":
    full = ids(run_world(script, ["epoch", root, "2"], 1, pp))[0]
    first = ids(run_world(script, ["epoch", root, "2", "40", state], 1, pp))[0]
    rest = ids(run_world(script, ["resume", root, "2", "-1", state], 1, pp))[0]
    print(json.dumps({"lib": lib, "check": "resume after 40 batches, 2 workers", "same_order": first + rest == full,
                      "first_diff": next((k for k, (a, b) in enumerate(zip(first + rest, full)) if a != b), None),
                      "len": [len(first + rest), len(full)]}))
elif scenario == "elastic":
    for before, after in ((2, 1), (1, 2)):
        first = ids(run_world(script, ["epoch", root, "2", "20", state], before, pp))
        rest = ids(run_world(script, ["resume", root, "2", "-1", state], after, pp))
        check([i for r in first + rest for i in r], f"elastic {before} -> {after} ranks after 20 batches each")
if scenario == "remote":
    import shutil
    remote = {"mds": "s3://cmp/mds", "lit": "s3://cmp/lit", "wds": "http://127.0.0.1:5056"}[lib]
    cache = f"/tmp/cmp/{lib}-cache"
    shutil.rmtree(cache, ignore_errors=True); os.makedirs(cache)
    env = dict(CMP_REMOTE=remote, CMP_CACHE=cache, S3_ENDPOINT_URL="http://127.0.0.1:5055",
               AWS_ENDPOINT_URL="http://127.0.0.1:5055", AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1", AWS_ALLOW_HTTP="true",
               CMP_STORAGE=json.dumps({"endpoint_url": "http://127.0.0.1:5055"}) if lib == "lit" else "{}")
    limit = os.environ.get("LIMIT")
    if limit:
        env["CMP_CACHE_LIMIT"] = limit; env["CMP_CACHE_LIMIT_BYTES"] = os.environ.get("LIMIT_BYTES", "-1")
    for label in ("cold", "warm"):
        r = run_world(script, ["epoch", root, "2"], 1, pp, extra_env=env)[0]
        if not r:
            print(json.dumps({"lib": lib, "remote": label, "failed": True})); break
        r = r[-1]
        print(json.dumps({"lib": lib, "remote": label, "limit": limit, "samples": len(r["ids"]),
                          "distinct": len(set(r["ids"])), "seconds": round(r["seconds"], 2),
                          "peak_cache": r["peak_cache"], "cache_after": r["cache_after"]}))
if scenario == "throughput":
    for workers in (0, 2):
        best = min(run_world(script, ["epoch", root, str(workers)], 1, pp)[0][-1]["seconds"] for _ in range(3))
        print(json.dumps({"lib": lib, "throughput_workers": workers, "samples_per_s": round(N / best)}))
if scenario == "ranks":
    res = ids(run_world(script, ["epoch", root, "2"], 3, pp))
    print(json.dumps({"lib": lib, "per_rank_samples_3_ranks": [len(r) for r in res]}))
