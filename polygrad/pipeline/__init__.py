"""The stages of a gradient check, each a small module passing frozen dataclasses.

``prepare -> plan -> reference -> autodiff -> judge -> explain``:

* :mod:`.prepare` -- options (:class:`~.prepare.Options`), target, modes
  (:class:`~.prepare.Prepared`);
* :mod:`.plan` -- the reference's arithmetic, full Jacobian or projections,
  mp or not, the directions (:class:`~.plan.Plan`);
* :mod:`.reference` -- the reference derivatives with fallback and mp
  escalation (:class:`~.reference.Reference`);
* :mod:`.autodiff` -- the VJPs/JVPs beside the reference (:class:`~.judge.JudgeInput`)
  and their measured round-off;
* :mod:`.judge` -- the verdict rule, with its precedence table;
* :mod:`.assess` -- one implementation judged against one reference (used by
  both :func:`polygrad.check` and :func:`polygrad.compare`);
* :mod:`.explain` -- notes and the report's ``details``.

:mod:`.check` composes them into :func:`polygrad.check`.
"""
