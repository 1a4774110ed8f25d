"""Students: the shapes a distilled model may take, and the rule that picks one.

A student (`translator recipe --distill-from TEACHER`) learns from its teacher's
translations (Kim & Rush 2016) and is served on CPUs, where a sentence's cost is mostly
its decoder's: one step per target token, each through every decoder block and the
output layer. So the candidates keep an encoder at least as deep as the decoder was
(encoding runs once per sentence, in parallel) and cut the decoder to two blocks or one
(Kasai et al. 2021). The two at the teacher's width are cut from the teacher itself: its
encoder and some of its decoder blocks, weights and all (`teacher_blocks`), which learn
the teacher's translations faster than random weights do; the last candidate halves the
width, and starts from random weights with a deeper encoder. The rule takes the largest
student cut from the teacher whose decoding, timed beside the teacher's, is at least the
asked-for times faster, else the fastest cut one: a student from random weights is taken
by name only, since in every job measured it lost more BLEU to its teacher than a cut
one did (bench/RESULTS.md, "Students for CPU serving").
Pure Python: the timing is `training.recipe.teacher`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from training.planning.rules import Shape
from translator.config import TransformerConfig
from translator.pruning import evenly_spaced_blocks

# How many times faster than the teacher a student must decode, unless the user says.
DEFAULT_SPEEDUP = 2.0
# Encoder blocks of a half-width student: at least this many (or the teacher's, if more).
STUDENT_ENCODER_LAYERS = 6


@dataclasses.dataclass(frozen=True)
class StudentChoice:
    """The student shape chosen, the speeds it was chosen on, and why."""

    shape: Shape
    # Decoding speed relative to the teacher's, per candidate name (timed).
    speedups: Mapping[str, float]
    reason: str


def student_shapes(teacher: TransformerConfig, preset: str) -> tuple[Shape, ...]:
    """The candidates for a teacher, largest first.

    Args:
        teacher: The teacher's architecture (its width and depth).
        preset: The preset name the shapes carry (their other fields are the teacher's).
    """
    cut = teacher.num_encoder_layers
    deep = max(teacher.num_encoder_layers, STUDENT_ENCODER_LAYERS)
    d, heads, ffn = teacher.d_model, teacher.num_heads, teacher.ffn_dim
    half_heads = max(1, heads // 2) if (d // 2) % max(1, heads // 2) == 0 else heads
    two = (Shape("student-2", preset, cut, 2, d, heads, ffn),)
    return (
        *(two if teacher.num_decoder_layers > 2 else ()),
        Shape("student-1", preset, cut, 1, d, heads, ffn),
        Shape("student-1-half", preset, deep, 1, d // 2, half_heads, ffn // 2),
    )


def teacher_blocks(teacher: TransformerConfig, student: Shape) -> tuple[int, ...]:
    """The teacher's decoder blocks a student starts from; () if it starts from random.

    A student is cut from its teacher when it has the teacher's width and encoder: it
    keeps the teacher's embeddings, output layer and encoder, and decoder blocks evenly
    spaced from the teacher's first to its last (one block: the last).
    """
    same_width = (student.d_model, student.num_heads, student.ffn_dim) == (
        teacher.d_model,
        teacher.num_heads,
        teacher.ffn_dim,
    )
    if not same_width or student.encoder_layers != teacher.num_encoder_layers:
        return ()
    if student.decoder_layers > teacher.num_decoder_layers:
        return ()
    return evenly_spaced_blocks(teacher.num_decoder_layers, student.decoder_layers)


def choose_student(
    teacher: TransformerConfig,
    candidates: tuple[Shape, ...],
    speedups: Mapping[str, float],
    wanted: float,
) -> StudentChoice:
    """The largest student cut from the teacher decoding at least `wanted` times its speed.

    Only the students cut from the teacher compete (`teacher_blocks`); a faster one from
    random weights is named in the reason, with how to take it.

    Args:
        teacher: The teacher's architecture (which candidates are cut from it).
        candidates: Largest first (`student_shapes`).
        speedups: Each candidate's timed decoding speed over the teacher's.
        wanted: The speed-up asked for (`--student-speedup`).

    Returns:
        The choice; when no cut student is fast enough, the fastest cut one, and the
        reason says so.
    """
    timed = ", ".join(f"{shape.name} {speedups[shape.name]:.2f}x" for shape in candidates)
    cut = tuple(shape for shape in candidates if teacher_blocks(teacher, shape)) or candidates
    for shape in cut:
        if speedups[shape.name] >= wanted:
            reason = (
                f"the largest student cut from the teacher decoding >= {wanted:g}x its "
                f"speed (beam search timed beside it at equal lengths: {timed})"
            )
            return StudentChoice(shape, dict(speedups), reason)
    fastest = max(cut, key=lambda shape: speedups[shape.name])
    reason = (
        f"no student cut from the teacher decodes {wanted:g}x its speed here, so the "
        f"fastest of them (beam search timed beside it at equal lengths: {timed})"
    )
    faster = [
        shape
        for shape in candidates
        if shape not in cut and speedups[shape.name] > speedups[fastest.name]
    ]
    if faster:
        other = max(faster, key=lambda shape: speedups[shape.name])
        reason += (
            f"; {other.name} is faster but starts from random weights, which lost more "
            f"BLEU than a cut student in every job measured: --student {other.name} takes it"
        )
    return StudentChoice(fastest, dict(speedups), reason)


def named_student(candidates: tuple[Shape, ...], name: str) -> Shape:
    """The candidate called `name` (`--student NAME`).

    Raises:
        ValueError: no candidate has that name; the message lists them.
    """
    for shape in candidates:
        if shape.name == name:
            return shape
    names = ", ".join(shape.name for shape in candidates)
    raise ValueError(f"--student {name}: not a student shape; one of {names}")
