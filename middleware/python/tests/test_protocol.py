"""The package's reading of src/protocol.txt (pg_idempotency/protocol.py): the route rules
give the protocol's examples, the options are the protocol's with their old spellings
still taken, and a key is read as every package reads it.  No database."""
import inspect
import unittest
import warnings
from dataclasses import fields

from pg_idempotency import protocol
from pg_idempotency.core import Options, canonical_route, key_text
from pg_idempotency.starlette import IdempotencyMiddleware


class Protocol(unittest.TestCase):
    def test_route_rules_give_the_examples(self):
        for syntax, pattern, canonical in protocol.ROUTE_EXAMPLES:
            self.assertEqual(canonical_route(syntax, pattern), canonical, (syntax, pattern))

    def test_options_are_the_protocols(self):
        names = [field.name for field in fields(Options)]
        self.assertEqual(sorted(names), sorted(protocol.OPTIONS))
        defaults = Options()
        self.assertEqual((defaults.header, defaults.max_request_bytes, defaults.methods),
                         ("Idempotency-Key", 1024 * 1024, ("POST", "PATCH")))

    def test_old_names_still_work_with_a_warning(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            old = Options(per_route=True, max_body_bytes=10)
        self.assertEqual((old.scope_per_route, old.max_request_bytes), (True, 10))
        self.assertEqual(sorted(str(w.message).split()[3] for w in caught),
                         ["max_body_bytes", "per_route"])
        self.assertTrue(all(w.category is DeprecationWarning for w in caught))

    def test_every_option_is_a_starlette_keyword_with_its_default(self):
        # The middleware spells Options' fields out (see its __init__): none may be missed,
        # and the old names are still taken.
        keywords = {name: parameter.default for name, parameter
                    in inspect.signature(IdempotencyMiddleware).parameters.items()
                    if parameter.kind is inspect.Parameter.KEYWORD_ONLY}
        expected = {field.name: field.default for field in fields(Options)}
        expected.pop("methods")  # a positional parameter, as before
        expected.update(per_route=None, max_body_bytes=None)
        self.assertEqual(keywords, expected)

    def test_a_key_is_the_headers_bytes_read_as_utf8(self):
        self.assertEqual(key_text("moved-\u00e9-\U0001F642".encode().decode("latin-1")),
                         "moved-\u00e9-\U0001F642")
        self.assertIsNone(key_text("caf\xe9"))
        self.assertIsNone(key_text("\ud800"))
        self.assertEqual(key_text("d\u00e9\u20ac"), "d\u00e9\u20ac")  # decoded before


if __name__ == "__main__":
    unittest.main()
