"""A named-entity head fitted at build time on the encoder's own token states, so the demo tags people and places
without a trained checkpoint and without torch.

    sentences = labelled_sentences(split, count, seed)       templates x gazetteers, entity spans in characters
    tags = token_tags(tokenizer, sentence)                   a BIO tag per token (WordPiece: first subword B-)
    head, report = fit_entity_head(encoder, tokenizer)       multinomial logistic regression in numpy

The training sentences come from TRAIN_TEMPLATES filled with TRAIN_PEOPLE and TRAIN_PLACES; the held-out ones from
HELD_OUT_TEMPLATES with HELD_OUT_PEOPLE and HELD_OUT_PLACES (names, places and templates the head never saw), on which
the report gives token accuracy and entity F1. The features are all-MiniLM-L6-v2's last hidden state of the token and
of the token before it (zeros before [CLS]): ``logits = [state_t, state_t-1] @ W.T + b`` with W [labels, 2 x hidden]
(``bert_graph.build_token_graph(previous_token=True)``). The previous token's state is what tells a surname (I-PER)
from a first name (B-PER): with the token's own state alone the held-out entity F1 is about 0.77, with both about
0.87. Fitted by full-batch gradient descent (Nesterov momentum, L2) on standardised features, the standardisation
folded into W and b afterwards. Everything is seeded and runs on one thread, so the same package versions give the
same head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from tokenizers import Tokenizer

from ortserve_devtools.bert_graph import INPUT_NAMES, LAST_HIDDEN_STATE
from ortserve_devtools.bert_weights import ClassifierHead
from ortserve_devtools.wordpiece_tokenizer import PAD_ID

ENTITY_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
SLOTS = {"{PER}": "PER", "{LOC}": "LOC"}

TRAIN_FIRST_NAMES = (
    "Anna", "Ben", "Carlos", "Zoë", "José", "Maria", "Ahmed", "Fatima", "Liam", "Olivia", "Noah", "Emma", "Lucas",
    "Sofia", "Mateo", "Chloé", "Hiroshi", "Yuki", "Priya", "Ravi", "Lena", "Jonas", "Ingrid", "Björn", "Elena",
    "Ivan", "Nadia", "Omar", "Grace", "Peter", "Laura", "Daniel", "Sarah", "Tom", "Marta", "Pablo", "Amélie",
    "Kwame", "Aisha", "Chen", "Mei", "Diego", "Hannah", "Felix", "Julia", "Samuel",
)
TRAIN_SURNAMES = (
    "Smith", "García", "Müller", "Rossi", "Tanaka", "Kowalski", "Nguyen", "Johansson", "Dubois", "Okafor",
    "Patel", "Silva", "Novak", "Brown", "Fischer", "López", "Andersen", "Costa", "Ivanova", "Schmidt",
)
TRAIN_PLACES = (
    "Paris", "London", "Berlin", "Madrid", "Rome", "Malmö", "München", "東京", "Tokyo", "Oslo", "Vienna",
    "Lisbon", "Dublin", "Prague", "Warsaw", "Stockholm", "Helsinki", "Athens", "Cairo", "Nairobi", "Lagos",
    "Mumbai", "Delhi", "Beijing", "Seoul", "Sydney", "Toronto", "Chicago", "Boston", "Mexico", "Brazil",
    "Canada", "Germany", "France", "Japan", "Spain", "Italy", "Sweden", "India", "Kenya", "New York",
    "San Francisco", "Buenos Aires", "Rio de Janeiro", "Hong Kong", "Cape Town", "Barcelona", "Amsterdam",
    "上海", "京都", "New Delhi", "Saint Petersburg", "Las Vegas", "Tel Aviv", "Kuala Lumpur",
)
HELD_OUT_FIRST_NAMES = (
    "Søren", "Isabel", "Mohammed", "Clara", "Andrés", "Kenji", "Ana", "Victor", "Leila", "Oscar", "Rosa",
    "Thomas", "Zainab", "Élodie",
)
HELD_OUT_SURNAMES = ("Martin", "Hernández", "Yamamoto", "Bianchi", "Kim", "Wagner", "Jensen", "Moreau")
HELD_OUT_PLACES = (
    "Zürich", "Kraków", "Copenhagen", "Budapest", "Edinburgh", "Montreal", "Osaka", "Istanbul", "Lima",
    "Vancouver", "Portugal", "Norway", "Los Angeles", "São Paulo", "北京", "Brussels",
)
TRAIN_TEMPLATES = (
    "{PER} lives in {LOC}.",
    "{PER} moved to {LOC} last year.",
    "Yesterday {PER} flew from {LOC} to {LOC}.",
    "I met {PER} in {LOC}.",
    "{PER} and {PER} visited {LOC} in May.",
    "The conference in {LOC} was opened by {PER}.",
    "{PER} was born in {LOC}.",
    "We drove from {LOC} to {LOC} with {PER}.",
    "Have you heard from {PER} since she left {LOC}?",
    "{PER} works at a hospital in {LOC}.",
    "Please send the report to {PER} before Friday.",
    "{LOC} is colder than {LOC} in winter.",
    "The train to {LOC} was late again.",
    "According to {PER}, the museum in {LOC} is closed.",
    "{PER} said the weather was lovely.",
    "My sister {PER} studies in {LOC}.",
    "Flights from {LOC} were cancelled because of the storm.",
    "{PER} called me from {LOC} this morning.",
    "Dinner with {PER} and {PER} tonight.",
    "She wrote a book about {LOC}.",
    "Thanks to {PER} for the help!",
    "The best coffee I ever had was in {LOC}.",
    "{PER} will present the results on Monday.",
    "Is {PER} coming to {LOC} next week?",
    "We went to {LOC} to see {PER}.",
    "I am going to meet {PER} tomorrow.",
    "{PER} wrote to {PER} from {LOC}.",
    "She gave the keys to {PER} and drove to {LOC}.",
    "The meeting starts at nine and ends at noon.",
    "I bought a new phone yesterday.",
    "The weather was lovely all week.",
)
HELD_OUT_TEMPLATES = (
    "{PER} spent the summer in {LOC}.",
    "Last week {PER} travelled to {LOC} and {LOC}.",
    "Ask {PER} about the hotel in {LOC}.",
    "{PER} teaches music in {LOC}.",
    "The mayor of {LOC} thanked {PER}.",
    "{PER} flew from {LOC} to {LOC} to meet {PER}.",
    "Our office in {LOC} is run by {PER}.",
    "Nobody expected the rain to stop so soon.",
)
TRAIN_SENTENCES, HELD_OUT_SENTENCES = 1200, 300
STEPS, LEARNING_RATE, MOMENTUM, L2 = 300, 0.5, 0.9, 1e-2
SEED = 31


@dataclass(frozen=True)
class Sentence:
    text: str
    entities: tuple[tuple[int, int, str], ...]
    """(start, end, type) in characters, in order."""


@dataclass(frozen=True)
class HeadReport:
    """The fitted head's figures: training loss, and on the held-out split token accuracy and entity F1."""

    train_tokens: int
    held_out_tokens: int
    final_loss: float
    train_accuracy: float
    token_accuracy: float
    entity_precision: float
    entity_recall: float
    entity_f1: float

    def line(self) -> str:
        return (f"held-out (unseen names, places and templates): token accuracy {self.token_accuracy:.3f}, entity "
                f"F1 {self.entity_f1:.3f} (precision {self.entity_precision:.3f}, recall {self.entity_recall:.3f}, "
                f"{self.held_out_tokens} tokens); train accuracy {self.train_accuracy:.3f} on {self.train_tokens} "
                f"tokens, loss {self.final_loss:.4f}")


def _fill(template: str, people: Sequence[str], places: Sequence[str], rng: np.random.Generator) -> Sentence:
    text, entities, rest = "", [], template
    while True:
        found = [(rest.find(slot), slot) for slot in SLOTS if slot in rest]
        if not found:
            return Sentence(text=text + rest, entities=tuple(entities))
        at, slot = min(found)
        text += rest[:at]
        value = (people if SLOTS[slot] == "PER" else places)[int(rng.integers(len(people if SLOTS[slot] == "PER"
                                                                                 else places)))]
        entities.append((len(text), len(text) + len(value), SLOTS[slot]))
        text += value
        rest = rest[at + len(slot):]


def _people(first: Sequence[str], last: Sequence[str], rng: np.random.Generator, count: int) -> list[str]:
    """First names alone and first + last names, about half each."""
    return [first[int(rng.integers(len(first)))] + ("" if rng.random() < 0.5 else " " + last[int(rng.integers(
        len(last)))]) for _ in range(count)]


def labelled_sentences(split: str, count: int, seed: int = SEED) -> list[Sentence]:
    """`count` sentences of the "train" or "held-out" split, deterministic in `seed`."""
    if split == "train":
        templates, first, last, places = TRAIN_TEMPLATES, TRAIN_FIRST_NAMES, TRAIN_SURNAMES, TRAIN_PLACES
    elif split == "held-out":
        templates, first, last, places = HELD_OUT_TEMPLATES, HELD_OUT_FIRST_NAMES, HELD_OUT_SURNAMES, HELD_OUT_PLACES
    else:
        raise ValueError(f"split must be 'train' or 'held-out', got {split!r}")
    rng = np.random.default_rng([seed, 0 if split == "train" else 1])
    people = _people(first, last, rng, 4 * len(first))
    return [_fill(templates[int(rng.integers(len(templates)))], people, places, rng) for _ in range(count)]


def token_tags(tokenizer: Tokenizer, sentence: Sentence) -> tuple[list[int], list[int]]:
    """(ids, tag index per token) as the bundle's tokenizer reads the text: special tokens O, an entity's first
    token B-, every later token of it (further subwords and words) I-."""
    encoding = tokenizer.encode(sentence.text)
    tags = []
    for (start, end), special in zip(encoding.offsets, encoding.special_tokens_mask, strict=True):
        tag = "O"
        if not special and end > start:
            for e_start, e_end, kind in sentence.entities:
                if e_start <= start < e_end:
                    tag = ("B-" if start == e_start else "I-") + kind
                    break
        tags.append(ENTITY_LABELS.index(tag))
    return list(encoding.ids), tags


def token_states(encoder: onnx.ModelProto, tokenizer: Tokenizer, sentences: Sequence[Sentence],
                 batch_size: int = 64) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(states float32 [tokens, hidden], tags int [tokens], tokens per sentence) of every token, special ones
    included, from a head-less ``build_token_graph`` run batched and padded as the server runs it."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # deterministic, and a build on a shared machine
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(encoder.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rows = [token_tags(tokenizer, s) for s in sentences]
    states, tags = [], []
    for at in range(0, len(rows), batch_size):
        chunk = rows[at:at + batch_size]
        seq = max(len(ids) for ids, _ in chunk)
        feed = {name: np.full((len(chunk), seq), PAD_ID, dtype=np.int64) for name in INPUT_NAMES}
        for r, (ids, _) in enumerate(chunk):
            feed["input_ids"][r, :len(ids)] = ids
            feed["attention_mask"][r, :len(ids)] = 1
        (hidden,) = session.run([LAST_HIDDEN_STATE], feed)
        for r, (ids, row_tags) in enumerate(chunk):
            states.append(hidden[r, :len(ids)])
            tags.extend(row_tags)
    return np.concatenate(states), np.asarray(tags, dtype=np.int64), [len(ids) for ids, _ in rows]


def with_previous(states: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """[tokens, 2 x hidden]: each token's state beside the previous token's of the same text (zeros for the first),
    the features ``build_token_graph(previous_token=True)`` gives its head."""
    previous = np.zeros_like(states)
    at = 0
    for n in lengths:
        previous[at + 1:at + n] = states[at:at + n - 1]
        at += n
    return np.hstack([states, previous])


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def fit_softmax_regression(x: np.ndarray, y: np.ndarray, labels: int, *, steps: int = STEPS,
                           learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
                           l2: float = L2) -> tuple[ClassifierHead, float]:
    """Multinomial logistic regression, full batch, Nesterov momentum, in float64 from zeros (deterministic).
    Returns the head on the raw features (standardisation folded in) and the final training loss."""
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    z = (x.astype(np.float64) - mean) / std
    onehot = np.eye(labels)[y]
    w = np.zeros((z.shape[1], labels))
    b = np.zeros(labels)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    loss = float("nan")
    for _ in range(steps):
        lw, lb = w + momentum * vw, b + momentum * vb  # look ahead
        p = _softmax(z @ lw + lb)
        loss = float(-np.log(np.maximum((p * onehot).sum(axis=1), 1e-12)).mean() + 0.5 * l2 * (lw * lw).sum())
        grad = (p - onehot) / len(z)
        gw, gb = z.T @ grad + l2 * lw, grad.sum(axis=0)
        vw, vb = momentum * vw - learning_rate * gw, momentum * vb - learning_rate * gb
        w, b = w + vw, b + vb
    weight = (w / std[:, None]).T  # [labels, hidden]
    bias = b - (mean / std) @ w
    return ClassifierHead(weight=weight.astype(np.float32), bias=bias.astype(np.float32)), loss


def entity_spans(tags: Sequence[int]) -> set[tuple[int, int, str]]:
    """(first token, end token, type) of each entity in a BIO tag sequence (an I- without its B- starts one)."""
    spans: set[tuple[int, int, str]] = set()
    start, kind = -1, ""
    for i, tag in enumerate([*tags, 0]):
        label = ENTITY_LABELS[tag]
        if kind and (label == "O" or label.startswith("B-") or label[2:] != kind):
            spans.add((start, i, kind))
            kind = ""
        if label != "O" and not kind:
            start, kind = i, label[2:]
    return spans


def _scores(predicted: np.ndarray, tags: np.ndarray, lengths: Sequence[int]) -> tuple[float, float, float, float]:
    """(token accuracy over the non-special tokens, entity precision, recall, F1) over sentences of `lengths`."""
    right = total = found = gold = correct = 0
    at = 0
    for n in lengths:
        p, t = predicted[at + 1:at + n - 1], tags[at + 1:at + n - 1]  # [CLS] ... [SEP]
        right += int((p == t).sum())
        total += len(t)
        ps, ts = entity_spans(p.tolist()), entity_spans(t.tolist())
        found, gold, correct = found + len(ps), gold + len(ts), correct + len(ps & ts)
        at += n
    precision, recall = correct / max(found, 1), correct / max(gold, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return right / max(total, 1), precision, recall, f1


def fit_entity_head(encoder: onnx.ModelProto, tokenizer: Tokenizer, *, seed: int = SEED) -> tuple[ClassifierHead,
                                                                                                   HeadReport]:
    """The head over ENTITY_LABELS (weight [labels, 2 x hidden], see `with_previous`) fitted on the training split,
    and its figures on the held-out split."""
    states, y, train_lengths = token_states(encoder, tokenizer, labelled_sentences("train", TRAIN_SENTENCES, seed))
    x = with_previous(states, train_lengths)
    head, loss = fit_softmax_regression(x, y, len(ENTITY_LABELS))
    train_accuracy = _scores((x @ head.weight.T + head.bias).argmax(axis=1), y, train_lengths)[0]
    states, hy, lengths = token_states(encoder, tokenizer, labelled_sentences("held-out", HELD_OUT_SENTENCES, seed))
    hx = with_previous(states, lengths)
    accuracy, precision, recall, f1 = _scores((hx @ head.weight.T + head.bias).argmax(axis=1), hy, lengths)
    return head, HeadReport(train_tokens=len(y), held_out_tokens=len(hy), final_loss=loss,
                            train_accuracy=train_accuracy, token_accuracy=accuracy, entity_precision=precision,
                            entity_recall=recall, entity_f1=f1)
