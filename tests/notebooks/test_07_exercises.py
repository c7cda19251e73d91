"""Notebook 07's exercises: each check given a likely wrong answer, and the notebook's answer. The checks
run on the CPU, on `meta` and on `device`: a GPU is one more device in the same loop, with no branch of
its own."""
import pytest
import torch
from torch.nn import functional as F

from support.notebook_code import load_helpers

nb = load_helpers("07")
CPU = torch.device("cpu")


@pytest.mark.exercise("07", "class-numbers")
def test_exercise_1_tells_labels_minus_one_without_long_that_cross_entropy_needs_long():
    assert nb.check_class_numbers(nb.to_class_numbers, CPU).startswith("NOT DONE YET")
    assert nb.check_class_numbers(nb.to_class_numbers_answer, CPU).startswith("PASSED")
    # the likely slip: the shift without .long(), which keeps the CSV's floats
    assert nb.check_class_numbers(lambda labels: labels - 1, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned torch.float32; cross_entropy "
        "needs torch.long class numbers: add .long().")
    problem = nb.label_problems(torch.tensor([1, 2, 3, 3, 1]), num_classes=3)[0]
    assert nb.check_class_numbers(lambda labels: labels.long(), CPU) == (
        f"NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned [1, 2, 3, 3, 1], and "
        f"label_problems says: {problem}.")
    assert problem.startswith("2 label(s) of 3 or more")
    assert nb.check_class_numbers(lambda labels: labels.long() % 3, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned [1, 2, 0, 0, 1], not "
        "[0, 1, 2, 2, 0]: class 1 becomes 0, 2 becomes 1, 3 becomes 2."), "in range, but the wrong classes"
    assert nb.check_class_numbers(lambda labels: (labels.long() - 1).tolist(), CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned [0, 1, 2, 2, 0] (a list), not a "
        "tensor.")
    assert nb.check_class_numbers(lambda labels: None, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned None (a NoneType), not a tensor.")

    def made_elsewhere(labels):  # on a GPU, torch.tensor(...) of Python numbers lands on the CPU:
        return (labels.long() - 1).to("meta")  # meta stands in for that other device here

    assert nb.check_class_numbers(made_elsewhere, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned a tensor on meta, but the labels "
        "are on cpu, where cross_entropy finds the scores: compute the class numbers from labels, which "
        "keeps them there.")

    def one_hot_classes(labels):  # an error of the learner's own: said with its line, not a traceback
        return F.one_hot(labels - 1, 3)

    raised = nb.check_class_numbers(one_hot_classes, CPU)
    assert raised.startswith("NOT YET RIGHT: your one_hot_classes raised RuntimeError: one_hot is only "
                             "applicable to index tensor")
    assert raised.endswith("of its cell: `return F.one_hot(labels - 1, 3)`.")


class PositionsNamedInAdvance(nb.CountedFeatures):
    """The likely slip: `.to(device)` with the device the code was written for (here the CPU's)."""

    def forward(self, x):
        return self.linear(x + torch.arange(x.shape[1]).to(CPU))


class PositionsFromOne(nb.CountedFeatures):
    def forward(self, x):
        return self.linear(x + torch.arange(1, x.shape[1] + 1, device=x.device))


class PositionsTooFew(nb.CountedFeatures):
    def forward(self, x):
        return self.linear(x + torch.arange(3, device=x.device))


class PositionsTypo(nb.CountedFeatures):
    def forward(self, x):
        return self.linear(x + torch.arange(x.shape[1], device=x.device, dtype="float"))


class PositionsWithoutReturn(nb.CountedFeatures):
    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)
        self.linear(x + positions)


@pytest.mark.exercise("07", "positions")
def test_exercise_2_tells_a_tensor_moved_to_a_device_named_in_advance_to_use_the_inputs_device():
    assert nb.check_positions(nb.CountedFeatures, CPU).startswith("NOT DONE YET")
    assert nb.check_positions(nb.CountedFeaturesAnswer, CPU) == (
        "PASSED: it runs on cpu and meta, and computes what the reference computes.")
    named = nb.check_positions(PositionsNamedInAdvance, CPU)
    assert named.startswith("NOT YET RIGHT: with the model and its inputs on meta, forward raised "
                            "RuntimeError: ")
    assert named.endswith("Make positions where the inputs are (x.device), not on a device named in advance.")
    torch.manual_seed(0)
    from_one, inputs = PositionsFromOne(6), torch.rand(4, 6, generator=torch.Generator().manual_seed(0))
    off = (from_one(inputs) - from_one.linear(inputs + torch.arange(6))).abs().max().item()
    assert nb.check_positions(PositionsFromOne, CPU) == (
        f"NOT YET RIGHT: on the CPU the output is off by up to {off:.3g} from the reference: positions are "
        f"0, 1, ..., 5 for 6 features.")
    assert off > 1e-5
    too_few = nb.check_positions(PositionsTooFew, CPU)
    assert "on cpu, forward raised RuntimeError: The size of tensor" in too_few and "x.device" not in too_few
    assert nb.check_positions(PositionsWithoutReturn, CPU) == (
        "NOT YET RIGHT: on cpu, forward returned None (a NoneType), not 2 scores for each of the 4 inputs: it "
        "ends with `return self.linear(x + positions)`.")
    typo = nb.check_positions(PositionsTypo, CPU)  # an error of the learner's own: its line, no traceback
    assert typo.startswith("NOT YET RIGHT: your forward raised TypeError: arange() received an invalid "
                           "combination of arguments")
    assert typo.endswith('of its cell: `return self.linear(x + torch.arange(x.shape[1], device=x.device, '
                         'dtype="float"))`.')


@pytest.mark.exercise("07", "log-softmax")
def test_exercise_3_shows_how_far_adding_a_small_number_to_the_probabilities_is_off():
    assert nb.check_log_softmax(nb.my_log_softmax, CPU).startswith("NOT DONE YET")
    assert nb.check_log_softmax(nb.log_softmax_answer, CPU).startswith("PASSED")

    def plus_a_little(scores):  # the likely slip: hide log(0) by adding a small number
        return torch.log(torch.softmax(scores, dim=1) + 1e-8)

    assert nb.check_log_softmax(plus_a_little, CPU) == (
        "NOT YET RIGHT: on scores in the hundreds [-300.0, 0.0, 300.0], class 0: yours is -18.42, "
        "torch.log_softmax's -600, off by 582.")

    def overflows(scores):  # Step 3's naive log-softmax: exp(300) is inf in float32
        return scores - torch.exp(scores).sum(dim=1, keepdim=True).log()

    large = [[0.0, 100.0, 200.0], [-300.0, 0.0, 300.0]]
    assert nb.check_log_softmax(overflows, CPU) == (
        f"NOT YET RIGHT: on scores in the hundreds {large} it gave inf or nan: "
        f"{overflows(torch.tensor(large)).tolist()}.")

    def no_keepdim(scores):
        return scores - torch.logsumexp(scores, dim=1)

    with pytest.raises(RuntimeError) as raised:
        no_keepdim(torch.tensor([[1.0, 2.0, 3.0], [0.5, -0.5, 0.0]]))
    assert str(raised.value).startswith("The size of tensor")
    assert nb.check_log_softmax(no_keepdim, CPU) == (
        f"NOT YET RIGHT: on small scores it raised RuntimeError: {str(raised.value).splitlines()[0]}. "
        f"keepdim=True keeps one sum per row.")
    assert nb.check_log_softmax(lambda s: torch.logsumexp(s, dim=1), CPU) == (
        "NOT YET RIGHT: on small scores it gave (2,), not a tensor of shape (2, 3): one log-probability "
        "per score.")

    def without_return(scores):
        scores - torch.logsumexp(scores, dim=1, keepdim=True)

    assert nb.check_log_softmax(without_return, CPU) == (
        "NOT YET RIGHT: on small scores it gave None (a NoneType), not a tensor of shape (2, 3): one "
        "log-probability per score.")

    def made_elsewhere(scores):  # meta stands in for the CPU of a machine whose scores are on a GPU
        return torch.log_softmax(scores, dim=1).to("meta")

    assert nb.check_log_softmax(made_elsewhere, CPU) == (
        "NOT YET RIGHT: on small scores it gave a tensor on meta, but the scores are on cpu: compute it "
        "from scores, which keeps it there.")

    def no_dim(scores):  # an error of the learner's own (a TypeError): said with its line
        return torch.log_softmax(scores)

    assert nb.check_log_softmax(no_dim, CPU).startswith("NOT YET RIGHT: your no_dim raised TypeError: ")
    assert nb.check_log_softmax(no_dim, CPU).endswith(" of its cell: `return torch.log_softmax(scores)`.")
