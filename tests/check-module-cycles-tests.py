#!/usr/bin/env python3
"""Tests of check-module-cycles.py: small source trees, written to a temporary folder,
with and without a cycle, and what the script says about each.

    python3 tests/check-module-cycles-tests.py
"""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "check-module-cycles.py"


class Tree:
    """A crate's source tree in a temporary folder: {relative path: text}."""

    def __init__(self, files: dict[str, str]):
        self._dir = tempfile.TemporaryDirectory()
        self.root = Path(self._dir.name)
        (self.root / "Cargo.toml").write_text('[package]\nname = "fixture"\n')
        for rel, text in files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))

    def check(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )

    def close(self) -> None:
        self._dir.cleanup()


class CheckModuleCycles(unittest.TestCase):
    def tree(self, files: dict[str, str]) -> Tree:
        t = Tree(files)
        self.addCleanup(t.close)
        return t

    def assert_clean(self, r: subprocess.CompletedProcess) -> None:
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no cycle", r.stdout)

    def assert_cycle(self, r: subprocess.CompletedProcess, members: str) -> None:
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f"a cycle of {len(members.split(', '))} modules: {members}", r.stdout)

    def test_a_layered_crate_has_no_cycle(self):
        t = self.tree(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\nmod c;\n",
                "src/a.rs": "use crate::b::B;\nuse crate::c;\npub fn f() { crate::c::g(); }\n",
                "src/b.rs": "use super::c::C;\npub struct B(C);\n",
                "src/c.rs": "pub struct C;\npub fn g() {}\n",
            }
        )
        r = t.check("src")
        self.assert_clean(r)
        self.assertIn("src: 3 modules, 3 dependencies between them, no cycle", r.stdout)

    def test_two_modules_that_use_each_other_are_a_cycle_with_its_files_and_lines(self):
        t = self.tree(
            {
                "src/lib.rs": "pub mod a;\npub mod b;\n",
                "src/a.rs": "//! a\n\nuse crate::b::B;\npub struct A;\n",
                "src/b.rs": "pub struct B;\n\nfn f() {\n    let _ = super::a::A;\n}\n",
            }
        )
        r = t.check("src")
        self.assert_cycle(r, "a, b")
        self.assertIn("the shortest through a: a -> b -> a", r.stdout)
        self.assertIn("src/a.rs:3: use crate::b::B;", r.stdout)
        self.assertIn("src/b.rs:4: let _ = super::a::A;", r.stdout)

    def test_the_shortest_cycle_of_a_larger_set_is_shown(self):
        # a -> b -> c -> a, and a -> c: the set is {a, b, c}, the shortest cycle a -> c -> a.
        t = self.tree(
            {
                "src/lib.rs": "mod a;\nmod b;\nmod c;\nmod d;\n",
                "src/a.rs": "use crate::b::X;\nuse crate::c::Y;\nuse crate::d::Z;\n",
                "src/b.rs": "use crate::c::Y;\n",
                "src/c.rs": "use crate::a::W;\n",
                "src/d.rs": "pub struct Z;\n",
            }
        )
        r = t.check("src")
        self.assert_cycle(r, "a, b, c")
        self.assertIn("a -> c -> a", r.stdout)
        self.assertNotIn("src/d.rs", r.stdout)
        verbose = t.check("--verbose", "src")
        self.assertIn("the other dependencies inside it:", verbose.stdout)
        self.assertIn("src/b.rs:1: use crate::c::Y;", verbose.stdout)

    def test_grouped_uses_and_macro_paths_count(self):
        t = self.tree(
            {
                "src/lib.rs": "mod a;\nmod b;\nmod c;\n",
                "src/a.rs": "use crate::{\n    c::C,\n    b::{self, B},\n};\n",
                "src/b.rs": "macro_rules! m { () => { $crate::a::f() }; }\n",
                "src/c.rs": "pub struct C;\n",
            }
        )
        r = t.check("src")
        self.assert_cycle(r, "a, b")
        self.assertIn("src/a.rs:1: use crate::{", r.stdout)
        self.assertIn("src/b.rs:1: macro_rules!", r.stdout)

    def test_comments_strings_and_chars_do_not_count(self):
        t = self.tree(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": "use crate::b::B;\n",
                "src/b.rs": """\
                    //! Not [`crate::a::A`].
                    /* crate::a::A, /* nested */ crate::a::A */
                    pub struct B;
                    const S: &str = "crate::a::A \\" crate::a::A";
                    const R: &str = r#"crate::a::A " crate::a::A"#;
                    const Q: char = '"';
                    fn f<'a>(x: &'a str) -> &'a str { x }
                    const T: &str = "use crate::a::A;";
                """,
            }
        )
        self.assert_clean(t.check("src"))

    def test_a_module_folder_is_checked_with_its_reexports(self):
        # Inside net/: tcp names udp's Socket through the re-export in net/mod.rs, udp
        # names tcp through crate::net::tcp. The crate's top level has no cycle.
        t = self.tree(
            {
                "src/main.rs": "mod net;\nmod util;\n",
                "src/util.rs": "pub fn u() {}\n",
                "src/net/mod.rs": "mod tcp;\nmod udp;\npub use udp::Socket;\nuse crate::util;\n",
                "src/net/tcp.rs": "use super::Socket;\nuse crate::util::u;\n",
                "src/net/udp/mod.rs": "mod frame;\npub struct Socket;\n",
                "src/net/udp/frame.rs": "fn f() { crate::net::tcp::g(); }\n",
            }
        )
        self.assert_clean(t.check("src"))
        r = t.check("src/net")
        self.assert_cycle(r, "tcp, udp")
        self.assertIn("src/net/tcp.rs:1: use super::Socket;", r.stdout)
        self.assertIn("src/net/udp/frame.rs:1: fn f() { crate::net::tcp::g(); }", r.stdout)
        # Both folders in one call: the exit status is the worse one.
        self.assertEqual(t.check("src", "src/net").returncode, 1)

    def test_super_in_inline_and_nested_modules_resolves_to_the_right_module(self):
        t = self.tree(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                # super::b from a::inner, and super::super::b from a::inner::deeper, are
                # crate::a::b, a's own.
                "src/a.rs": "mod b {}\nmod inner {\n    use super::b;\n    mod deeper {\n        use super::super::b;\n    }\n}\n",
                "src/b/mod.rs": "mod x;\n",
                # super::super from b::x is the crate: super::super::a is crate::a.
                "src/b/x.rs": "use super::super::a;\n",
            }
        )
        self.assert_clean(t.check("src"))

    def test_test_code_counts_unless_left_out(self):
        t = self.tree(
            {
                "src/lib.rs": "mod a;\nmod b;\nmod c;\n",
                "src/a.rs": "use crate::b::B;\nuse crate::c::C;\n",
                "src/b.rs": """\
                    pub struct B;
                    #[cfg(test)]
                    mod tests {
                        use crate::a::A;
                        #[test]
                        fn t() {}
                    }
                """,
                "src/c/mod.rs": "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nuse crate::a::A;\n",
                "src/c/tests.rs": "use crate::a::helper;\n",
            }
        )
        r = t.check("src")
        self.assert_cycle(r, "a, b, c")
        self.assert_clean(t.check("--ignore-tests", "src"))

    def test_glob_imports_and_other_crates_name_no_module(self):
        t = self.tree(
            {
                "src/lib.rs": "mod a;\nmod b;\n",
                "src/a.rs": "use crate::b::B;\nuse std::fmt;\nuse ::a::x;\n",
                "src/b.rs": "use super::*;\nuse a::y;\nfn f() { a::z(); }\n",
            }
        )
        self.assert_clean(t.check("src"))

    def test_a_missing_folder_is_a_usage_error(self):
        t = self.tree({"src/lib.rs": ""})
        r = t.check("src", "nowhere")
        self.assertEqual(r.returncode, 2)
        self.assertIn("nowhere is not a folder", r.stderr)


if __name__ == "__main__":
    unittest.main()
