"""Lesson 01 mutants: plausible mistakes in api_states.py / verify_states.py, one per check at least."""

from tests.mutants import Mutant

MUTANTS = [
    Mutant(
        name="location-points-to-collection",
        file="api_states.py",
        old='response.headers["Location"] = f"/exports/{job_id}"',
        new='response.headers["Location"] = "/exports"',
        fails=("01.1", "01.3"),
        why="Location must lead to this job, not to the collection (the learner's verify_states.py asserts it too)",
    ),
    Mutant(
        name="submit-answers-200",
        file="api_states.py",
        old='@app.post("/exports", status_code=202)',
        new='@app.post("/exports")',
        fails=("01.1", "01.3"),
        why="forgetting status_code=202 answers 200, which reads as 'done' (verify_states.py asserts 202 too)",
    ),
    Mutant(
        name="one-id-for-every-job",
        file="api_states.py",
        old=('@app.post("/exports", status_code=202)\n'
             'async def submit_export(body: ExportIn, response: Response) -> dict:\n'
             '    job_id = str(uuid4())\n'),
        new=('job_id = str(uuid4())  # made once, at import time\n\n\n'
             '@app.post("/exports", status_code=202)\n'
             'async def submit_export(body: ExportIn, response: Response) -> dict:\n'),
        fails=("01.1",),
        why="an id made once at import: every submission overwrites the same job, "
            "so an earlier Location no longer leads to its own job",
    ),
    Mutant(
        name="new-job-starts-running",
        file="api_states.py",
        old='"status": "queued",',
        new='"status": "running",',
        fails=("01.2", "01.3"),
        why="nothing executes jobs in this lesson; a new job must be queued "
            "(verify_states.py then cannot start it either)",
    ),
    Mutant(
        name="unknown-id-returns-null",
        file="api_states.py",
        old='raise HTTPException(status_code=404, detail="export job not found / 导出任务不存在")',
        new="return None",
        fails=("01.2",),
        why="an unknown id answered 200 with null instead of 404",
    ),
    Mutant(
        name="assign-before-check",
        file="api_states.py",
        old=('    if target not in allowed[current]:\n'
             '        raise ValueError(f"{current} -> {target} is not allowed")\n'
             '    row["status"] = target\n'),
        new=('    row["status"] = target\n'
             '    if target not in allowed[current]:\n'
             '        raise ValueError(f"{current} -> {target} is not allowed")\n'),
        fails=("01.3",),
        why="the refusal comes after the write, leaving a half-updated record",
    ),
    Mutant(
        name="succeeded-allows-running",
        file="api_states.py",
        old='"succeeded": set(),',
        new='"succeeded": {"running"},',
        fails=("01.3",),
        why="a terminal state that allows moves lets a late worker overwrite the result",
    ),
    Mutant(
        name="verify-script-catches-wrong-error",
        file="verify_states.py",
        old="    except ValueError:\n",
        new="    except KeyError:\n",
        fails=("01.3",),
        why="the learner script must see the ValueError and print terminal transition rejected",
    ),
    Mutant(
        name="no-max-length",
        file="api_states.py",
        old="Field(min_length=1, max_length=100)",
        new="Field(min_length=1)",
        fails=("01.4",),
        why="without max_length a 101-id export is accepted",
    ),
    Mutant(
        name="no-min-length",
        file="api_states.py",
        old="Field(min_length=1, max_length=100)",
        new="Field(max_length=100)",
        fails=("01.4",),
        why="without min_length an empty export is accepted",
    ),
    Mutant(
        name="float-ids",
        file="api_states.py",
        old="product_ids: list[int] =",
        new="product_ids: list[float] =",
        fails=("01.4",),
        why="list[float] lets 1.5 through as a product id",
    ),
    Mutant(
        name="terminal-stored-once",
        file="api_states.py",
        old='    return {**row, "terminal": row["status"] in TERMINAL}\n',
        new=('    row.setdefault("terminal", row["status"] in TERMINAL)\n'
             '    return row\n'),
        fails=("01.5",),
        why="terminal saved when the job was submitted stays False after it finishes",
    ),
]
