"""The kit's own tools, each started as `python -m checks.tools.NAME`.

Two run in a box beside a lesson's reference code (never a learner's folder), in its work folder so the
lesson's modules import as they do for its scripts: the soak (`make soak`, lesson 16's code under chaos)
and the durable-path benchmark (`make bench`, lesson 13's).  Two are for maintainers, run in the kit:
`messages` (the zh.po catalogues beside the code) and `sizes` (each lesson's checker beside its code)."""
