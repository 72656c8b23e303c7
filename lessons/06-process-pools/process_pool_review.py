"""Lesson 06, step 3: which functions can cross into a worker process.

Run:  python process_pool_review.py

A worker does not receive the function's code.  It receives a name -- module plus
qualified name -- and imports that.  A function created inside another function
has no such name, so sending it fails before any work starts:

    def main():
        def local_score(text):              # exists only inside this call of main()
            return len(text)
        pool.submit(local_score, "product")  # -> Can't pickle local object 'main.<locals>.local_score'

Recognise that shape in review; do not keep it in a real entry point.
The shape that works: a top-level function of an importable module.
"""

from cpu_work import score_text

# Being callable is not enough: a worker must be able to import it by module and name.
assert callable(score_text)
assert "<locals>" not in score_text.__qualname__, "score_text must be defined at the top of cpu_work.py"
print("a worker can import", f"{score_text.__module__}.{score_text.__qualname__}")
