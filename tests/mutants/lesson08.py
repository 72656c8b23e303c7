"""Lesson 08 mutants: plausible mistakes with the broker, the worker and the producer."""

from tests.mutants import Mutant

MUTANTS = [
    # ---- 08.1: authenticated PING
    Mutant(
        name="08-ping-without-password",
        file="ping_broker.py",
        old='client = Redis.from_url(os.environ["CELERY_BROKER_URL"], socket_connect_timeout=2, socket_timeout=2)',
        new='client = Redis(host="127.0.0.1", port=6384, socket_connect_timeout=2, socket_timeout=2)',
        fails=("08.1",),
        why="Connecting by host and port drops the password from the URL: the broker answers NOAUTH.",
    ),
    Mutant(
        name="08-ping-prints-url",
        file="ping_broker.py",
        old='    print("PONG" if client.ping() else "unexpected reply")\n',
        new='    print("connecting to", os.environ["CELERY_BROKER_URL"])\n'
            '    print("PONG" if client.ping() else "unexpected reply")\n',
        fails=("08.1",),
        why="Printing the broker URL for debugging puts the password into the terminal and its logs.",
    ),
    # ---- 08.2: products.export registered
    Mutant(
        name="08-task-without-stable-name",
        file="export_tasks.py",
        old='@app.task(name="products.export")',
        new="@app.task",
        fails=("08.2",),
        why="Without name= the task is registered as export_tasks.export_products; producers built from this "
            "module still match, but the contract name products.export is gone (the diagnosis names what the worker "
            "replied, the hint the decorator's name=).",
        says=(("08.2", "it replied with export_tasks.export_products: the task is registered under another name"),),
        hints=(("08.2", "Name the task in its decorator"),),
    ),
    Mutant(
        name="08-include-missing",
        file="celery_app.py",
        old='    include=["export_tasks"],',
        new="",
        fails=("08.2", "08.3", "08.4", "08.7"),
        why="The worker imports only celery_app, so it never learns products.export: every message is an "
            "unregistered task (the API still answers 202: publishing needs no worker).  08.2 says the worker "
            "replied with an empty list (not \"no reply\") and its hint is about include.",
        says=(("08.2", "the worker replied, but with an empty task list"),),
        hints=(("08.2", "A worker knows only the modules celery_app makes it import"),),
    ),
    # ---- 08.3: producer result
    Mutant(
        name="08-absolute-path",
        file="export_tasks.py",
        old='"path": str(target),',
        new='"path": str(target.resolve()),',
        fails=("08.3",),
        why="A resolved path names a folder on the worker's machine; the contract is a relative path.",
    ),
    Mutant(
        name="08-producer-own-message-id",
        file="produce_export.py",
        old="result = export_products.apply_async(args=[job_id, rows], task_id=job_id)",
        new="result = export_products.apply_async(args=[job_id, rows])",
        fails=("08.3",),
        why="Without task_id=job_id Celery invents a message id, so the id the producer reports is not the job's.",
    ),
    # ---- 08.4: artifact equals the snapshot
    Mutant(
        name="08-artifact-wrapped",
        file="export_tasks.py",
        old="json.dumps(rows, ensure_ascii=False, sort_keys=True)",
        new='json.dumps({"count": len(rows), "rows": rows}, ensure_ascii=False, sort_keys=True)',
        fails=("08.4",),
        why="Wrapping the rows in an envelope means the file no longer equals the submitted snapshot.",
    ),
    # ---- 08.5: the API never waits
    Mutant(
        name="08-api-waits-for-result",
        file="api_submit.py",
        old="        export_products.apply_async(args=[job_id, rows], task_id=job_id)\n",
        new="        export_products.apply_async(args=[job_id, rows], task_id=job_id).get(timeout=10)\n",
        fails=("08.5",),
        why="result.get() in the handler ties the request to the worker: with the worker stopped it hangs.",
    ),
    Mutant(
        name="08-api-runs-inline",
        file="api_submit.py",
        old="        export_products.apply_async(args=[job_id, rows], task_id=job_id)\n",
        new="        export_products(job_id, rows)\n",
        fails=("08.5",),
        why="Calling the task function runs the export inside the API process; no message ever reaches the broker.",
    ),
    Mutant(
        name="08-api-peeks-at-result",
        file="api_submit.py",
        old="        export_products.apply_async(args=[job_id, rows], task_id=job_id)\n",
        new="        result = export_products.apply_async(args=[job_id, rows], task_id=job_id)\n"
            "        try:\n"
            "            result.get(timeout=0.5)  # a quick look at the outcome; answer 202 either way\n"
            "        except Exception:\n"
            "            pass\n",
        fails=("08.5",),
        why="A short result.get before answering still ties every request to the worker (here half a second "
            "each while it is down); the answer comes, a little late, so only the recorded wait gives it away.",
    ),
    # ---- 08.6: prepare_broker.py
    Mutant(
        name="08-prepare-prints-password",
        file="prepare_broker.py",
        old='    print("local broker files created; credentials were not printed")\n',
        new='    print("local broker files created; password:", password)\n',
        fails=("08.6",),
        why="The password ends up in the terminal, its scrollback and any captured log.",
    ),
    Mutant(
        name="08-prepare-overwrites",
        file="prepare_broker.py",
        old='    if ENV_FILE.exists() or FOLDER.exists():\n'
            '        raise SystemExit("local broker configuration exists; reuse it (nothing was changed)")\n',
        new='    import shutil\n    ENV_FILE.unlink(missing_ok=True)\n    shutil.rmtree(FOLDER, ignore_errors=True)\n',
        fails=("08.6",),
        why="Regenerating on every run gives clients a password the running broker does not know.",
    ),
    Mutant(
        name="08-prepare-checks-both-with-and",
        file="prepare_broker.py",
        old="    if ENV_FILE.exists() or FOLDER.exists():\n",
        new="    if ENV_FILE.exists() and FOLDER.exists():\n",
        fails=("08.6",),
        why="With half a configuration the script starts writing before it notices the other file.",
    ),
    Mutant(
        name="08-prepare-env-readable",
        file="prepare_broker.py",
        old="    ), 0o600)\n",
        new="    ), 0o644)\n",
        fails=("08.6",),
        why="Mode 0644 lets every local user read the broker password.",
    ),
    Mutant(
        name="08-prepare-results-on-broker-db",
        file="prepare_broker.py",
        old='        f"CELERY_RESULT_BACKEND=redis://:{in_url}@127.0.0.1:{HOST_PORT}/1\\n"\n',
        new='        f"CELERY_RESULT_BACKEND=redis://:{in_url}@127.0.0.1:{HOST_PORT}/0\\n"\n',
        fails=("08.6",),
        why="Results in the broker's database 0 mix task messages and results in one keyspace; the diagnosis says "
            "what the folder wrote beside what it should be, and its hint is about the URLs, not the files' modes.",
        says=(("08.6", "CELERY_RESULT_BACKEND in .env.tasks is redis://…@127.0.0.1:6384/0"),),
        hints=(("08.6", "prepare_broker.py writes both URLs from one template"),),
    ),
    Mutant(
        name="08-prepare-no-quote",
        file="prepare_broker.py",
        old='    in_url = quote(password, safe="")',
        new="    in_url = password",
        fails=("08.6",),
        why="A password with '/' or '+' breaks an unencoded URL: it no longer decodes to the password.",
    ),
    # ---- 08.7: exercise, the message waits for the worker
    Mutant(
        name="08-task-expires-quickly",
        file="export_tasks.py",
        old='@app.task(name="products.export")',
        new='@app.task(name="products.export", expires=2)',
        fails=("08.7",),
        why="A short expires drops every message that waited longer than 2 s: work queued while the worker "
            "was down is REVOKED instead of done (the waiting message carries that expiry).",
    ),
]
