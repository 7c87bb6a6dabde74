"""The call-center rules for the four readings the grammars got wrong: an amount before
the noun it describes, a card's MM/YY expiry, a user name, and month/day dates joined
to one ("on 10/1 and 10/15"); and what they must leave alone."""

from __future__ import annotations

import pytest

from cosyvoiced.tts.frontend.normalize import normalize_text


@pytest.mark.parametrize(("written", "spoken"), [
    ("a $100 gift card", "a one hundred dollar gift card"),
    ("The $25 late fee applies.", "The twenty five dollar late fee applies."),
    ("an €80 voucher", "an eighty euro voucher"),
    ("A $40 bottle of wine.", "A forty dollar bottle of wine."),
    ("We have credited $25 to your account.", "We have credited twenty five dollars to your account."),
    ("You will save $5 a month.", "You will save five dollars a month."),
])
def test_an_amount_before_its_noun_is_singular(written, spoken):
    assert normalize_text(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("Your card expires 09/28.", "Your card expires oh nine, twenty eight."),
    ("Expiration date: 12/2031.", "Expiration date: twelve, twenty thirty one."),
    ("Your Visa ending in 4242 expires 01/30.",
     "Your Visa ending in four two four two expires oh one, thirty."),
    ("The offer expires 11/30.", "The offer expires November thirtieth."),
])
def test_a_card_expiry_is_read_as_printed(written, spoken):
    assert normalize_text(written) == spoken


@pytest.mark.parametrize(("written", "spoken"), [
    ("Your username is jsmith42.", "Your username is J smith four two."),
    ("Your login is admin7.", "Your login is admin seven."),
    ("username: xkcd9", "username: X K C D nine"),
])
def test_a_user_name_is_a_word_or_an_initial_and_a_name_with_its_digits(written, spoken):
    assert normalize_text(written) == spoken


def test_month_day_dates_joined_to_one_are_all_dates():
    assert (normalize_text("We received 2 payments on 10/1 and 10/15.")
            == "We received two payments on October first and October fifteenth.")
    assert (normalize_text("Due on 3/1, 3/8 or 3/15.")
            == "Due on March first, March eighth or March fifteenth.")
