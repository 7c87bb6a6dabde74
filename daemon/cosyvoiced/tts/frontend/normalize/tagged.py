"""NeMo's parser of tagged tokens and its reordering, without pynini.

Copied from NVIDIA NeMo-text-processing 1.2.0 (Apache License 2.0, Copyright (c) 2021
NVIDIA CORPORATION): `text_normalization/token_parser.py` (TokenParser, kept as it is
but for typing) and the token reordering of `text_normalization/normalize.py`
(`Normalizer._permute`, `generate_permutations`,
`_split_tokens_to_reduce_number_of_permutations`), made functions. Their modules import
pynini; these pieces are pure Python, so the runtime copies them instead.
"""

# Copyright (c) 2021, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

from __future__ import annotations

import itertools
import string
from collections import OrderedDict
from collections.abc import Iterator
from math import factorial
from typing import Any

PRESERVE_ORDER_KEY = "preserve_order"
EOS = "<EOS>"


class TokenParser:
    """
    Parses tokenized/classified text, e.g. 'tokens { money { integer: "20" currency: "$" } } tokens { name: "left"}'

    Args
        text: tokenized text
    """

    def __call__(self, text: str) -> None:
        """
        Setup function

        Args:
            text: text to be parsed

        """
        self.text = text
        self.len_text = len(text)
        self.char = text[0]  # cannot handle empty string
        self.index = 0

    def parse(self) -> list[dict[str, Any]]:
        """
        Main function. Implements grammar:
        A -> space F space F space F ... space

        Returns list of dictionaries
        """
        tokens = []
        while self.parse_ws():
            token = self.parse_token()
            if not token:
                break
            tokens.append(token)
        return tokens

    def parse_token(self) -> dict[str, Any] | None:
        """
        Implements grammar:
        F-> no_space KG no_space

        Returns: K, G as dictionary values
        """
        d = OrderedDict()
        key = self.parse_string_key()
        if key is None:
            return None
        self.parse_ws()
        if key == PRESERVE_ORDER_KEY:
            self.parse_char(":")
            self.parse_ws()
            value = self.parse_chars("true")
        else:
            value = self.parse_token_value()

        d[key] = value
        return d

    def parse_token_value(self) -> Any:
        """
        Implements grammar:
        G-> no_space :"VALUE" no_space | no_space {A} no_space

        Returns: string or dictionary
        """
        if self.char == ":":
            self.parse_char(":")
            self.parse_ws()
            self.parse_char("\"")
            value_string = self.parse_string_value()
            self.parse_char("\"")
            return value_string
        elif self.char == "{":
            d = OrderedDict()
            self.parse_char("{")
            list_token_dicts = self.parse()
            # flatten tokens
            for tok_dict in list_token_dicts:
                for k, v in tok_dict.items():
                    d[k] = v
            self.parse_char("}")
            return d
        else:
            raise ValueError()

    def parse_char(self, exp: str) -> bool:
        """
        Parses character

        Args:
            exp: character to read in

        Returns true if successful
        """
        assert self.char == exp
        self.read()
        return True

    def parse_chars(self, exp: str) -> bool:
        """
        Parses characters

        Args:
            exp: characters to read in

        Returns true if successful
        """
        ok = False
        for x in exp:
            ok |= self.parse_char(x)
        return ok

    def parse_string_key(self) -> Any:
        """
        Parses string key, can only contain ascii and '_' characters

        Returns parsed string key
        """
        assert self.char not in string.whitespace and self.char != EOS
        incl_criterium = string.ascii_letters + "_"
        chars = []
        while self.char in incl_criterium:
            chars.append(self.char)
            if not self.read():
                raise ValueError()

        if not chars:
            return None
        return "".join(chars)

    def parse_string_value(self) -> Any:
        """
        Parses string value, ends with quote followed by space

        Returns parsed string value
        """
        # assert self.char not in string.whitespace and self.char != EOS
        assert self.char != EOS
        chars = []
        while self.char != "\"" or self.text[self.index + 1] != " ":
            chars.append(self.char)
            if not self.read():
                raise ValueError()

        if not chars:
            return None
        return "".join(chars)

    def parse_ws(self) -> bool:
        """
        Deletes whitespaces.

        Returns true if not EOS after parsing
        """
        not_eos = self.char != EOS
        while not_eos and self.char == " ":
            not_eos = self.read()
        return not_eos

    def read(self) -> bool:
        """
        Reads in next char.

        Returns true if not EOS
        """
        if self.index < self.len_text - 1:  # should be unique
            self.index += 1
            self.char = self.text[self.index]
            return True
        self.char = EOS
        return False


MAX_PERMUTATIONS = 729
"""NeMo's `max_number_of_permutations_per_split`."""


def _permute(d: dict[str, Any]) -> list[str]:
    """Reorderings of a token's fields, serialized (NeMo's `Normalizer._permute`)."""
    out: list[str] = []
    if PRESERVE_ORDER_KEY in d:
        d_permutations: Any = [d.items()]
    else:
        d_permutations = itertools.permutations(d.items())
    for perm in d_permutations:
        subl = [""]
        for k, v in perm:
            if isinstance(v, str):
                subl = ["".join(x) for x in itertools.product(subl, [f"{k}: \"{v}\" "])]
            elif isinstance(v, OrderedDict):
                rec = _permute(v)
                subl = ["".join(x) for x in itertools.product(subl, [f" {k} {{ "], rec, [" } "])]
            elif isinstance(v, bool):
                subl = ["".join(x) for x in itertools.product(subl, [f"{k}: true "])]
            else:
                raise ValueError("Key: " + str(k) + " Value: " + str(v))
        out.extend(subl)
    return out


def permutations(tokens: list[dict[str, Any]]) -> Iterator[str]:
    """Serializations of a token list, every reordering of each token's fields."""

    def _helper(prefix: str, idx: int) -> Iterator[str]:
        if idx == len(tokens):
            yield prefix
            return
        for option in _permute(tokens[idx]):
            yield from _helper(prefix + option, idx + 1)

    return _helper("", 0)


def _count(group: dict[str, Any]) -> int:
    n = 1
    for inner in group.values():
        if isinstance(inner, dict):
            n *= _count(inner)
    return n * factorial(len(group))


def split_tokens(tokens: list[dict[str, Any]],
                 limit: int = MAX_PERMUTATIONS) -> list[list[dict[str, Any]]]:
    """Tokens cut into runs whose reorderings number at most `limit` each."""
    splits: list[list[dict[str, Any]]] = []
    start, current = 0, 1
    for i, group in enumerate(tokens):
        n = _count(group)
        if n * current > limit:
            splits.append(tokens[start:i])
            start, current = i, 1
        if n > limit:
            raise ValueError(f"a token has {n} orderings, more than {limit}")
        current *= n
    splits.append(tokens[start:])
    return splits
