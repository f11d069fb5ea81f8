"""Keras on the JAX backend: a model the function closes over that writes its state.

Keras picks its backend at import, so the check runs in a fresh process with
``KERAS_BACKEND=jax`` (this file runs where Keras is installed: the tests-all session).
"""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_keras_model_on_jax_that_writes_its_statistics_is_refused_and_put_back():
    """Keras on the JAX backend (a fresh process: the backend is chosen at import): a
    BatchNormalization called with training=True is refused, its moving statistics stay
    concrete arrays with their values, and the model still runs."""
    code = """
import os
os.environ["KERAS_BACKEND"] = "jax"
import keras, jax.numpy as jnp, numpy as np, polygrad as pg
m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6),
                      keras.layers.BatchNormalization(), keras.layers.Dense(1)])
x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 4)), jnp.float32)
try:
    pg.check(lambda x: jnp.sum(m(x, training=True) ** 2), x)
except pg.InputMutationError as e:
    assert "moving_mean" in str(e), e
else:
    raise SystemExit("no error")
bn = m.layers[1]
np.testing.assert_array_equal(np.asarray(bn.moving_mean.value), np.zeros(6))
np.testing.assert_array_equal(np.asarray(bn.moving_variance.value), np.ones(6))
assert pg.check(lambda x: jnp.sum(m(x, training=False) ** 2), x).ok
print("OK")
"""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)  # fmt: skip
    assert run.returncode == 0 and "OK" in run.stdout, run.stderr[-3000:]
