"""The ``shards`` config key of the tasks: how remote shards are cached and read, declared once."""
from ...config.kinds import Fields, Integer, Invalid, ListOf, Number, OneOf, Text
from ...config.schema import Setting

SIZE = OneOf(Integer(minimum=1), Text(pattern=r"\s*[0-9]*\.?[0-9]+\s*([KMGTkmgt][Ii]?[Bb]|[Bb])?\s*",
                                      meaning="a size such as 50GB or 512MiB", plural="sizes"))
SHARDS = Fields(cache=(Text(non_empty=True, meaning="a folder"), None), cache_limit=(SIZE, None),
                retry_seconds=(Number(minimum=0, maximum=86_400), 60.0), shuffle_window=(Integer(minimum=1), 4))

SHARDS_SETTING = Setting(
    "shards", SHARDS, SHARDS.defaults(),
    "when a data setting names shards (a folder written by basetrainer shards, or s3://, gs://, azure://, hf://, "
    "r2://): cache, the folder remote shards are downloaded to (null: ~/.cache/basetrainer/shards); cache_limit, "
    "the most it holds (50GB; null: no limit); retry_seconds, how long a failed download is tried again before "
    "the run stops naming the URL; shuffle_window, how many shards an epoch's order reads at once",
    group="data")


class Source(Fields):
    """One source of a mixture: ``{path, weight}``, the path required, the weight 1 when left out."""

    def check(self, value):
        checked = super().check(value)
        if checked["path"] is None:
            raise Invalid("its path is missing")
        return checked


SOURCES = ListOf(Source(path=(Text(non_empty=True, meaning="a folder or URL of shards"), None),
                        weight=(Number(0, above=True), 1.0)), min_length=1)


def data_or_sources(path_kind):
    """A data setting's kind that also takes a list of ``{path, weight}``: shards of several sources mixed."""
    return OneOf(path_kind, SOURCES)


def shard_options(cfg) -> dict:
    """``open_shards``'s keyword arguments from ``cfg.shards`` (its defaults where the config has none)."""
    options = {**SHARDS.defaults(), **(cfg.get("shards") or {})}
    return {"cache": options["cache"], "cache_limit": options["cache_limit"],
            "retry_seconds": options["retry_seconds"], "shuffle_window": options["shuffle_window"]}
