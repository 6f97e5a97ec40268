"""The trainer's exception tree. A gate that refuses a candidate is a result, not an error."""


class TrainerError(Exception):
    """Base of every trainer error."""


class TrainingDataError(TrainerError):
    """The exported data cannot be trained on (empty, malformed); the message names the file and line."""


class PublishError(TrainerError):
    """The gateway refused to load or promote a version; the old version keeps serving."""
