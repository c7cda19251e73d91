"""Notebook 02's exercises: the starters say NOT DONE YET and the answers pass; each check given a likely
wrong answer, and the message meant for it."""
import pytest
import torch
from torch.utils.data import DataLoader

from support.notebook_code import load_helpers

CPU, META = torch.device("cpu"), torch.device("meta")


@pytest.fixture(scope="module")
def nb():
    return load_helpers("02")


def test_the_exercise_starters_say_not_done_yet_and_the_answers_pass(nb):
    for check, starter, answer, *given in [
            (nb.check_to_device, nb.to_device, nb.to_device_answer),
            (nb.check_start_state, nb.start_state, nb.start_state_answer),
            (nb.check_accuracy_on_device, nb.accuracy_on_device, nb.accuracy_on_device_answer, nb.new_cnn(CPU))]:
        assert check(starter, *given, CPU).startswith("NOT DONE YET")
        assert check(answer, *given, CPU).startswith("PASSED")


@pytest.mark.exercise("02", "to-device")
def test_exercise_1_a_move_whose_result_is_thrown_away(nb):
    def forgets_the_result(batch, device):
        for tensor in (batch.values() if isinstance(batch, dict) else batch):
            tensor.to(device)
        return batch

    assert nb.check_to_device(forgets_the_result, CPU) == (
        "NOT YET RIGHT: for a list, 2 of 2 tensors are still on cpu, not meta: .to() returns a moved "
        "copy; keep it.")


def test_exercise_1_a_dataloader_gives_a_list_batch_that_the_answer_keeps_a_list(nb):
    """The check's premise: default_collate makes a list of tuple samples, so the check tries a list,
    and the answer gives each kind of batch back as it came."""
    batch = next(iter(DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 3), torch.arange(4)),
                                 batch_size=2)))
    assert type(batch) is list
    images, labels = torch.randn(2, 3), torch.arange(2)
    for given in ([images, labels], (images, labels), {"images": images, "labels": labels}):
        moved = nb.to_device_answer(given, META)
        assert type(moved) is type(given)
        assert all(tensor.device == META for tensor in (moved.values() if isinstance(moved, dict) else moved))
    assert nb.check_to_device(nb.to_device_answer, CPU) == (
        "PASSED: a list, a tuple and a dict moved to meta and cpu, each kept its kind, every tensor and "
        "number kept.")


@pytest.mark.exercise("02", "to-device")
def test_exercise_1_an_answer_for_one_kind_of_batch_is_told_which_kind_it_failed_on(nb):
    def tuples_only(batch, device):
        return tuple(tensor.to(device) for tensor in batch)

    assert nb.check_to_device(tuples_only, CPU) == (
        "NOT YET RIGHT: for a list, to_device returned a tuple, not a list: return the kind it was "
        "given, so that the code after it works as before (type(batch)(...) makes a list of a list, a "
        "tuple of a tuple).")

    def a_list_for_every_sequence(batch, device):  # a list is not what a tuple's reader gets back
        if isinstance(batch, dict):
            return {name: tensor.to(device) for name, tensor in batch.items()}
        return [tensor.to(device) for tensor in batch]

    assert nb.check_to_device(a_list_for_every_sequence, CPU) == (
        "NOT YET RIGHT: for a tuple, to_device returned a list, not a tuple: return the kind it was "
        "given, so that the code after it works as before (type(batch)(...) makes a list of a list, a "
        "tuple of a tuple).")

    def sequences_only(batch, device):  # iterating a dict gives its keys, strings
        return type(batch)(tensor.to(device) for tensor in batch)

    assert nb.check_to_device(sequences_only, CPU) == (
        "NOT YET RIGHT: for a dict batch, to_device raised AttributeError: 'str' object has no "
        "attribute 'to'. Handle a list, a tuple and a dict: isinstance(batch, dict) tells them apart.")

    def tuples_and_dicts_only(batch, device):  # a list falls through to the dict's branch
        if isinstance(batch, tuple):
            return tuple(tensor.to(device) for tensor in batch)
        return {name: tensor.to(device) for name, tensor in batch.items()}

    assert nb.check_to_device(tuples_and_dicts_only, CPU) == (
        "NOT YET RIGHT: for a list batch, to_device raised AttributeError: 'list' object has no "
        "attribute 'items'. Handle a list, a tuple and a dict: isinstance(batch, dict) tells them "
        "apart.")


@pytest.mark.exercise("02", "to-device")
def test_exercise_1_each_other_mistake_gets_its_message(nb):
    def renames(batch, device):
        if isinstance(batch, dict):
            return {name.upper(): tensor.to(device) for name, tensor in batch.items()}
        return type(batch)(tensor.to(device) for tensor in batch)

    assert nb.check_to_device(renames, CPU) == (
        "NOT YET RIGHT: for a dict, the keys are ['IMAGES', 'LABELS'], not ['images', 'labels'].")

    def doubles(batch, device):
        if isinstance(batch, dict):
            return {name: 2 * tensor.to(device) for name, tensor in batch.items()}
        return type(batch)(2 * tensor.to(device) for tensor in batch)

    assert nb.check_to_device(doubles, CPU) == "NOT YET RIGHT: for a list on cpu, the numbers changed."

    def forgets_to_return(batch, device):
        moved = {name: tensor.to(device) for name, tensor in dict(enumerate(batch)).items()}

    assert nb.check_to_device(forgets_to_return, CPU) == (
        "NOT YET RIGHT: to_device returned None: return the moved batch.")

    def a_generator(batch, device):
        return (tensor.to(device) for tensor in batch)

    assert nb.check_to_device(a_generator, CPU) == (
        "NOT YET RIGHT: for a list, to_device returned a generator, not a list: return the kind it was "
        "given, so that the code after it works as before (type(batch)(...) makes a list of a list, a "
        "tuple of a tuple).")


@pytest.mark.exercise("02", "start-state")
def test_exercise_2_a_state_made_on_the_cpu(nb):
    def on_the_cpu(sequence, hidden_size):
        return torch.zeros(len(sequence), hidden_size)

    assert nb.check_start_state(on_the_cpu, CPU).startswith(
        "NOT YET RIGHT: for a sequence on meta, the state is on cpu, so TinyRNN's forward stops with the "
        "mismatch error")

    def ones(sequence, hidden_size):
        return torch.ones(len(sequence), hidden_size, device=sequence.device)

    assert nb.check_start_state(ones, CPU).startswith("NOT YET RIGHT: on cpu, TinyRNN's output is off by up to")

    def one_state_for_all(sequence, hidden_size):
        return torch.zeros(hidden_size, device=sequence.device)

    assert nb.check_start_state(one_state_for_all, CPU) == (
        "NOT YET RIGHT: for a batch of 5 sequences and hidden_size 16 the state has shape (16,), not (5, 16).")


@pytest.mark.exercise("02", "accuracy")
def test_exercise_3_batches_that_are_never_moved(nb):
    def never_moves(model, batches, device):
        right, seen = torch.zeros((), device=device), 0
        for inputs, labels in batches:
            right += (model(inputs).argmax(dim=1) == labels).sum()
            seen += len(labels)
        return right.item() / seen

    assert nb.check_accuracy_on_device(never_moves, nb.new_cnn(CPU), CPU) == (
        "NOT YET RIGHT: with device meta, the batches reached the model on cpu: move every batch with "
        ".to(device), and keep the result.")

    def a_tensor(model, batches, device):
        right, seen = torch.zeros((), device=device), 0
        for inputs, labels in batches:
            right += (model(inputs.to(device)).argmax(dim=1) == labels.to(device)).sum()
            seen += len(labels)
        return right / seen

    assert nb.check_accuracy_on_device(a_tensor, nb.new_cnn(CPU), CPU) == (
        "NOT YET RIGHT: accuracy_on_device returned a tensor on cpu: read the number with .item().")

    def counts_batches_not_samples(model, batches, device):
        right, seen = torch.zeros((), device=device), 0
        for inputs, labels in batches:
            right += (model(inputs.to(device)).argmax(dim=1) == labels.to(device)).sum()
            seen += 1
        return right.item() / seen

    assert nb.check_accuracy_on_device(counts_batches_not_samples, nb.new_cnn(CPU), CPU).startswith(
        "NOT YET RIGHT: on 160 images, accuracy_on_device says")


@pytest.mark.exercise("02", "start-state")
def test_exercise_2_a_state_that_is_no_tensor_is_told_so(nb):
    assert nb.check_start_state(lambda sequence, hidden_size: [0.0] * 2, CPU) == (
        "NOT YET RIGHT: start_state returned [0.0, 0.0] (a list), not a tensor.")
    assert nb.check_start_state(lambda sequence, hidden_size: None, CPU) == (
        "NOT YET RIGHT: start_state returned None (a NoneType), not a tensor.")

    def wrong_argument(sequence, hidden_size):
        return torch.zeros(len(sequence), hidden_size, device=sequence.devce)

    said = nb.check_start_state(wrong_argument, CPU)
    assert said.startswith("NOT YET RIGHT: your wrong_argument raised AttributeError: "), said


@pytest.mark.exercise("02", "accuracy")
def test_exercise_3_each_other_mistake_gets_its_message(nb):
    assert nb.check_accuracy_on_device(lambda model, batches, device: 0.25, nb.new_cnn(CPU), CPU) == (
        "NOT YET RIGHT: accuracy_on_device never called the model on a batch.")

    def counts(model, batches, device):
        right = torch.zeros((), device=device)
        for inputs, labels in batches:
            right += (model(inputs.to(device)).argmax(dim=1) == labels.to(device)).sum()
        return int(right.item())

    said = nb.check_accuracy_on_device(counts, nb.new_cnn(CPU), CPU)
    shown = said.split("accuracy_on_device returned ")[1].rsplit(", not a float", 1)[0]  # the count, and "(a int)"
    assert shown.split(" ")[0].isdigit() and "int" in shown
    assert said == f"NOT YET RIGHT: accuracy_on_device returned {shown}, not a float between 0 and 1.", said

    def raises_on_the_model(model, batches, device):
        for inputs, labels in batches:
            model(inputs.to(device)).argmax(dim=2)

    said = nb.check_accuracy_on_device(raises_on_the_model, nb.new_cnn(CPU), CPU)
    assert said.startswith("NOT YET RIGHT: your raises_on_the_model raised "), said
