"""The real-code corpus: polygrad on catalogs the frameworks ship, beside their own checkers.

Usage::

    python -m benchmarks corpus [--quick] [--cases TEXT] [--limit N] [--minutes M]
                                [--out-jsonl PATH] [--out-md PATH] [--resume] [--render]

Catalogs (:mod:`benchmarks.corpus.catalogs`): PyTorch's ``module_db`` and
``torch.special``; ``tf.math`` and every ``keras.layers`` layer that builds with
default arguments; ``jax.nn``, ``jax.scipy.special``, and the Flax linen/NNX and
Equinox layers that build with defaults. Points come from fixed seeds in hard
regions (:mod:`benchmarks.corpus.points`), in bfloat16, float16, float32 and
float64. Each correct case also runs with two planted bugs
(:mod:`benchmarks.corpus.frameworks`). Rows are appended to a JSON-lines file as
they come, so a partial run still gives a table (:mod:`benchmarks.corpus.table`).
"""
