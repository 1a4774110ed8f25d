"""A run's record (`RUN/model/metadata.json`) read back as written."""

import json

from training.record import RunRecord


def test_a_record_survives_its_json_and_an_older_one_takes_the_defaults(tmp_path):
    record = RunRecord(
        step=120,
        config={"model": {"preset": "tiny"}},
        best_validation_bleu=31.5,
        best_validation_step=100,
        validation_bleu=((50, 20.25), (100, 31.5)),
        budget_seconds=60.5,
        target_tokens=123_456,
    )
    (tmp_path / "metadata.json").write_text(json.dumps(record.to_dict()))
    assert RunRecord.read(tmp_path) == record
    older = RunRecord.from_dict({"step": 7, "validation_bleu": [[5, 1.0]], "retired": True})
    assert older == RunRecord(step=7, validation_bleu=((5, 1.0),))
