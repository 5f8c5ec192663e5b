"""One transfer across the workers of a Dask cluster (``dtune get --cluster`` / ``--workers``).

The parent (``run``) discovers the dataset once, packs it into shards by size (``shard``),
checks that every worker sees the output directory as the same shared file system
(``marker``), and submits one Dask task per shard. Each task runs the ordinary engine with its
own tuner on its shard (``worker``); files split by byte range across shards are verified and
renamed by the parent once every piece is in (``pieces``). dask and distributed are optional:
nothing here is imported by a plain ``dtune get``. See docs/cluster.md.
"""
