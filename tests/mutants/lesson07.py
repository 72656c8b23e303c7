"""Lesson 07 mutants (07.1–07.4, 07.11): mistakes in the executor decision and the message contract.

The task-center mutants (07.5–07.10) are in lesson07_taskcenter.py.
"""

from tests.mutants import Mutant

DURABLE_ROW = "| 关闭 API 后仍需完成导出 | 持久状态，需要独立于 API 的消费者 | 任务队列 + 状态表（第 08 课起） |\n"

MUTANTS = [
    # ---- 07.1: the workload table
    Mutant(
        name="07-no-durable-row",
        file="decision.md",
        old=DURABLE_ROW,
        new="",
        fails=("07.1",),
        why="Three rows only: nothing says which work must outlive the API, and no row reaches a task queue.",
    ),
    Mutant(
        name="07-empty-boundary",
        file="decision.md",
        old="| 同步 SDK 上传一个导出文件 | 阻塞 I/O，调用必须有超时 |",
        new="| 同步 SDK 上传一个导出文件 |  |",
        fails=("07.1",),
        why="A row without its main constraint cannot justify where the work runs.",
    ),
    Mutant(
        name="07-async-is-not-a-place",
        file="decision.md",
        old="| asyncio + 有界队列（第 02 课） |",
        new="| 异步 |",
        fails=("07.1",),
        why="Writing only \"async\" names a style, not the place the work runs (the lesson's step 1 warning).",
    ),
    Mutant(
        name="07-durable-on-threads",
        file="decision.md",
        old="| 任务队列 + 状态表（第 08 课起） |",
        new="| 更大的线程池 |",
        fails=("07.1",),
        why="More threads die with the API process; the work that must outlive it needs a queue and a status table.",
    ),
    Mutant(
        name="07-cpu-on-threads",
        file="decision.md",
        old="| 受限进程池（第 06 课） |",
        new="| 受限线程池（第 05 课） |",
        fails=("07.1",),
        why="Pure-Python CPU work in threads is serialised by the GIL; it belongs in a process pool (the hint "
            "says so, not the table's general one).",
        says=(("07.1", "is CPU-bound; in a thread pool the GIL serialises it - use a process pool"),),
        hints=(("07.1", "Pure-Python CPU work holds the GIL"),),
    ),
    Mutant(
        name="07-cpu-on-asyncio",
        file="decision.md",
        old="| 受限进程池（第 06 课） |",
        new="| asyncio 协程 |",
        fails=("07.1",),
        why="CPU work on the event loop never awaits: it holds the loop's one thread and stalls every coroutine; "
            "the diagnosis and its hint say so, not the GIL in threads.",
        says=(("07.1", "is CPU-bound; on the event loop it never awaits, so it holds the loop's one thread"),),
        hints=(("07.1", "asyncio only interleaves work that waits"),),
    ),
    Mutant(
        name="07-blocking-sdk-on-asyncio",
        file="decision.md",
        old="| 受限线程池（第 05 课） |",
        new="| asyncio 协程 |",
        fails=("07.1",),
        why="A synchronous SDK call on the event loop blocks every coroutine; it belongs in a bounded thread pool.",
        says=(("07.1", "blocks; on the event loop it stalls every coroutine - use a thread pool"),),
        hints=(("07.1", "A blocking call (a synchronous SDK) on the event loop"),),
    ),
    # ---- 07.2: the message itself and the contract's shape rules
    Mutant(
        name="07-float-price",
        file="message_contract.py",
        old='"is_active": False, "price_cents": 0},',
        new='"is_active": False, "price_cents": 19.99},',
        fails=("07.2",),
        why="A float price in yuan instead of integer cents: rounding drifts and the contract is broken.",
    ),
    Mutant(
        name="07-extra-field-in-message",
        file="message_contract.py",
        old='"is_active": False, "price_cents": 0},',
        new='"is_active": False, "price_cents": 0, "created_at": "2024-05-01"},',
        fails=("07.2",),
        why="The snapshot row carries a sixth field; the message must hold only the five product fields.",
    ),
    Mutant(
        name="07-checker-allows-extra-fields",
        file="message_contract.py",
        old="        if extra or missing:\n",
        new="        if missing:\n",
        fails=("07.2",),
        why="The checker only looks for missing fields, so rows can smuggle in anything else.",
    ),
    Mutant(
        name="07-size-in-characters",
        file="message_contract.py",
        old="    if len(encoded) >= MAX_BYTES:\n",
        new="    if len(text) >= MAX_BYTES:\n",
        fails=("07.2",),
        why="Counting characters instead of UTF-8 bytes lets a Chinese description three times larger through.",
    ),
    # ---- 07.3: the broker / worker / state lines
    Mutant(
        name="07-no-result-backend-line",
        file="decision.md",
        old="- result backend: 临时查询缓存，过期即消失，不能代替 export_jobs\n",
        new="",
        fails=("07.3",),
        why="Without the result backend line nobody knows the cache expires and is not the job's record.",
    ),
    Mutant(
        name="07-exactly-once-delivery",
        file="decision.md",
        old="- delivery: 同一消息可能被交付多次，业务处理必须幂等\n",
        new="- delivery: Celery 保证每个任务只执行一次\n",
        fails=("07.3",),
        why="Pitfall: using Celery and claiming exactly-once, ignoring acks, redelivery and side effects.",
    ),
    Mutant(
        name="07-worker-on-windows",
        file="decision.md",
        old="- worker: Celery 5.x，运行在 Linux 或 WSL2（原生 Windows 不是受支持平台）\n",
        new="- worker: Celery 5.x，直接在 Windows 上运行\n",
        fails=("07.3",),
        why="Celery 5.x does not support native Windows; the worker runs on Linux or WSL2.",
    ),
    Mutant(
        name="07-status-in-result-backend",
        file="decision.md",
        old="- durable status: MySQL 8.4 的 export_jobs 表，是任务状态的唯一真源\n",
        new="- durable status: 查 Redis 结果缓存\n",
        fails=("07.3",),
        why="Pitfall: treating the result cache as the job's life; its TTL is not the job's lifetime.",
    ),
    # ---- 07.4: the checker refuses non-JSON values and credentials
    Mutant(
        name="07-default-str",
        file="message_contract.py",
        old="json.dumps(message, ensure_ascii=False, allow_nan=False)",
        new="json.dumps(message, ensure_ascii=False, default=str)",
        fails=("07.4",),
        why="default=str turns a datetime, Decimal or connection object into text instead of refusing it.",
    ),
    Mutant(
        name="07-no-credential-scan",
        file="message_contract.py",
        old="    _check_no_credentials(message)\n",
        new="",
        fails=("07.4",),
        why="Without the scan a database URL with its password travels in the message to every worker log.",
    ),
    # ---- 07.11: the exercise answer
    Mutant(
        name="07-exercise-no-idempotency-key",
        file="decision.md",
        old="- 用 job_id 作幂等键，SDK 支持时一并传给它，重复交付不会重复上传；\n",
        new="",
        fails=("07.11",),
        why="A queue redelivers; without an idempotency key the 3 s SDK upload can happen twice.",
    ),
    Mutant(
        name="07-exercise-more-threads",
        file="decision.md",
        old="方案是组合而不是单选：由独立任务队列负责受理和跨重启恢复，"
            "worker 内部按 SDK 的性质直接同步调用，\n或放进受限线程。",
        new="方案：把线程池加大到 64。",
        fails=("07.11",),
        why="More threads do not survive an API restart; the answer needs an independent queue and worker.",
    ),
]
