"""Kit wrapper for check 13.3/13.6 (not a lesson file): an HTTP submit route around the learner's accept_export.

Used only when the folder's api_db.py has no POST /exports of its own (the course text has the
adapter function but leaves the route to "the existing HTTP submit path").  It adds nothing but the
route: the status codes, headers and rows all come from admission_adapter.accept_export.
"""

from admission_adapter import accept_export
from fastapi import FastAPI
from pydantic import BaseModel, StrictInt

app = FastAPI()


class ExportIn(BaseModel):
    product_ids: list[StrictInt]


@app.post("/exports", status_code=202)
def submit_export(body: ExportIn):
    return accept_export(body.product_ids)
