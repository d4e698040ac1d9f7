// Package docscheck tests the repository's documentation against the
// repository itself, so README.md and docs/ cannot drift from the code
// without a failing test. It has no code of its own: everything is in its
// tests, which CI runs with every other package.
//
// The checks:
//
//   - TestPackageTable: the table under "## Packages" in
//     docs/architecture.md lists exactly the repository's Go package
//     directories, one row each, the directory in backquotes in the first
//     cell. A directory counts when it holds a .go file that is not a test;
//     testdata and dot directories are skipped.
//   - TestLinks: every relative link in README.md and docs/*.md names a
//     file that exists, and a #fragment into a Markdown file names one of
//     its headings (GitHub's anchors: lower case, punctuation dropped,
//     spaces as '-').
//   - TestReadmeLength: README.md stays at most 1,700 words, counted as
//     whitespace-separated fields.
//   - TestQuickStart: the first ```sh block under README.md's "## Quick
//     start" is exactly the two set-up commands, and .ci/run runs the
//     tests as the second one does.
//   - TestFlagsDocumented: docs/reference.md's flag table has a row for
//     every flag that agentd -h prints, and none for another.
//   - TestRunnableBlocks: fenced blocks marked runnable run and succeed.
//   - TestVendorsAtTheEdge: `go list -deps` of the library packages the
//     architecture names (agentd, agentd/host, chat, agents, verify) holds
//     no model-vendor SDK: only the binary compiles one.
//   - TestNoPlaceholders: no line of README.md or docs/ holds a
//     placeholder ("stub", "being added", "on another branch", TBD, TODO,
//     FIXME).
//   - TestTourBinary: the README tour's build line, run as written, puts
//     the binary where the next line runs it, as a file git ignores;
//     docs/operations.md builds it the same way, and every command in the
//     docs runs that path.
//
// # Runnable blocks
//
// A fenced ```sh block whose previous non-blank line is the HTML comment
//
//	<!-- runnable -->
//
// is run by TestRunnableBlocks as one `sh -e` script from the repository
// root, with a freshly built agentd binary first on PATH (so a block says
// `agentd -h`, not `go run ./agentd/cmd/agentd -h`), and must exit 0
// within 30 seconds. The comment is invisible on GitHub. Mark only cheap
// commands that need no running daemon, no network and no tool beyond
// sh, go and agentd: help output, `agentd verify -h`, and the like.
// Every other block is documentation only, and shows commands a reader
// runs against a daemon of their own. A block that documents an interface
// not yet merged must not be marked.
package docscheck
