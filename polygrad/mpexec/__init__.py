"""Run a framework's captured program on mpmath numbers.

A float64 finite difference is a good reference for a float32 gradient but a
weak one for a float64 gradient. The backends therefore capture the user's
function once (a JAX jaxpr, a PyTorch ATen graph, a TensorFlow graph) and re-execute that program
operation by operation on NumPy object arrays of ``mpf`` at 50 (or ``dps``)
decimal digits: the very code the user wrote, evaluated far beyond float64.
Every coverage gap is found before anything runs, and a program that cannot
be re-executed leaves the check on its float64 reference with the reason in
the report.

Modules
-------
Shared by both frameworks:

* :mod:`.values` -- exact conversion of binary floats to ``mpf`` and of an
  evaluation point ``x0 + dx`` to input leaves;
* :mod:`.elementwise` -- scalar functions with the IEEE conventions both
  frameworks share (poles, domains, NaN);
* :mod:`.reductions` -- folds over axes, cumulative operations, sorting;
* :mod:`.linalg_conv` -- dilation and padding, window views, pooling-style
  window reductions, grouped N-D convolution;
* :mod:`.errors` -- the errors the entry points raise.

JAX (entry points :func:`.jaxpr.build_evaluate_mp`, :func:`.jaxpr.evaluate_jaxpr_mp`):

* :mod:`.jaxpr` -- the interpreter (elementwise, reductions, linear algebra,
  control flow) and the evaluators;
* :mod:`.jaxpr_rules` -- value representation and XLA's scalar conventions;
* :mod:`.jaxpr_indexing` -- data-movement primitives (index maps);
* :mod:`.jaxpr_coverage` -- primitive names and the coverage check.

PyTorch (entry point :func:`.torch_graph.torch_mp_evaluator`):

* :mod:`.torch_graph` -- :class:`~.torch_graph.GraphProgram` (the interpreter)
  and the evaluator;
* :mod:`.torch_capture` -- graph capture, decompositions, coverage check and
  the check that one trace is valid at other points;
* :mod:`.torch_env` -- value kinds, the rule registry and PyTorch's scalar
  conventions;
* :mod:`.torch_elementwise`, :mod:`.torch_indexing`,
  :mod:`.torch_reductions`, :mod:`.torch_nn` -- the operator rules by family.

TensorFlow (entry point :func:`.tf_graph.tf_mp_evaluator`):

* :mod:`.tf_graph` -- :class:`~.tf_graph.GraphProgram`, which runs the frozen
  float64 ``GraphDef`` the backend captures, node by node.

The same programs on IEEE binary128 arrays (numpy-quaddtype), every evaluation point
of a check in one pass where the framework allows it, for the quad tier of the
reference (:mod:`polygrad.reference.quad`): :mod:`.jaxpr_quad` (the jaxpr vmapped
over the points), :mod:`.torch_quad` (the ATen graph with a leading axis of points),
:mod:`.tf_quad` (the frozen graph, one point after another).

Importing this package imports no framework.
"""
