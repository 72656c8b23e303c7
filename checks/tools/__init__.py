"""The kit's own tools that run in a box beside a lesson's reference code (never a learner's folder):
the soak (`make soak`, lesson 16's code under chaos) and the durable-path benchmark (`make bench`,
lesson 13's).  Started as `python -m checks.tools.NAME` in the work folder, so the lesson's modules
import as they do for its scripts."""
