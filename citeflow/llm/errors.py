"""The model layer's errors: branches of citeflow.errors.ModelError, split by what a role does next.

    ModelError (citeflow.errors)
    ├── ModelRejected        the endpoint refused the request (400/401/403/404...): fail fast, no retry
    └── DegradableError      the role survives it by falling back to its safe default
        ├── ModelUnavailable the endpoint kept failing transiently past the retry bound
        ├── InvalidReply     the reply failed validation twice (once more with the error shown)
        ├── BudgetExhausted  the call would have crossed the run's budget, so it was not made
        └── ContextTooSmall  the prompt would not fit the model's context window, so it was not sent

Every message names the role, endpoint and model; none ever carries an API key.
"""

from __future__ import annotations

from citeflow.errors import ModelError


class ModelRejected(ModelError):
    def __init__(self, subject: str, problem: str, status: int) -> None:
        super().__init__(subject, problem, "no retry: fix the configuration and run again")
        self.status = status


class DegradableError(ModelError):
    # What went wrong in a few words of citeflow's own, for a report's caveat (the message may quote
    # the model and is for the run's error rows).
    what = "the model could not answer"
    # Whether the same call may well succeed on the next run (the endpoint was down, the budget spent).
    # A result that fell back for a transient reason is not cached; one that fell back because of what
    # the model replied to this prompt is, since the same prompt gets the same reply.
    transient = False


class ModelUnavailable(DegradableError):
    what = "the endpoint did not answer"
    transient = True


class InvalidReply(DegradableError):
    what = "its reply was invalid twice"


class BudgetExhausted(DegradableError):
    what = "the model budget was spent"
    transient = True


class ContextTooSmall(DegradableError):
    what = "the prompt did not fit its context window"
