package docscheck

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// root is the repository root, two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", dir, err)
	}
	return dir
}

// mdFiles lists README.md and docs/*.md, relative to the root.
func mdFiles(t *testing.T, dir string) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(dir, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(dir, d)
		files = append(files, rel)
	}
	return files
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goPackages walks the tree for directories holding a non-test .go file.
func goPackages(t *testing.T, dir string) map[string]bool {
	t.Helper()
	pkgs := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != dir && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel(dir, filepath.Dir(path))
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

var firstCell = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|")

// packageTable returns the packages the table under "## Packages" names.
func packageTable(t *testing.T, doc string) map[string]int {
	t.Helper()
	rows := map[string]int{}
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "#") {
			in = strings.TrimSpace(line) == "## Packages"
			continue
		}
		if !in {
			continue
		}
		if m := firstCell.FindStringSubmatch(line); m != nil {
			rows[strings.TrimSuffix(m[1], "/")]++
		}
	}
	if len(rows) == 0 {
		t.Fatal(`docs/architecture.md has no "## Packages" table`)
	}
	return rows
}

func TestPackageTable(t *testing.T) {
	dir := root(t)
	tree := goPackages(t, dir)
	table := packageTable(t, read(t, filepath.Join(dir, "docs", "architecture.md")))
	var missing, extra, twice []string
	for p := range tree {
		if table[p] == 0 {
			missing = append(missing, p)
		}
	}
	for p, n := range table {
		if !tree[p] {
			extra = append(extra, p)
		}
		if n > 1 {
			twice = append(twice, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(twice)
	if len(missing) > 0 {
		t.Errorf("docs/architecture.md's package table lacks %d package(s) of the tree: %s", len(missing), strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		t.Errorf("docs/architecture.md's package table lists %d directory(ies) that hold no Go package: %s", len(extra), strings.Join(extra, ", "))
	}
	if len(twice) > 0 {
		t.Errorf("docs/architecture.md's package table lists more than once: %s", strings.Join(twice, ", "))
	}
}

func TestReadmeLength(t *testing.T) {
	const max = 1700
	n := len(strings.Fields(read(t, filepath.Join(root(t), "README.md"))))
	if n > max {
		t.Errorf("README.md has %d words, at most %d: move detail into docs/", n, max)
	}
}

var (
	link      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fence     = regexp.MustCompile("^\\s*(```|~~~)")
	nonAnchor = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(doc string) map[string]bool {
	a := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		s := strings.ToLower(h)
		s = nonAnchor.ReplaceAllString(s, "")
		s = strings.ReplaceAll(s, " ", "-")
		if n := seen[s]; n > 0 {
			a[s+"-"+itoa(n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	}
	return a
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

// stripCode blanks fenced blocks and inline code, where brackets are not links.
func stripCode(doc string) string {
	var b strings.Builder
	inFence := false
	inline := regexp.MustCompile("`[^`]*`")
	for _, line := range strings.Split(doc, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			b.WriteString("\n")
			continue
		}
		if inFence {
			b.WriteString("\n")
			continue
		}
		b.WriteString(inline.ReplaceAllString(line, ""))
		b.WriteString("\n")
	}
	return b.String()
}

func TestLinks(t *testing.T) {
	dir := root(t)
	// Each file's anchors are read once: the docs link into the large
	// reference hundreds of times.
	anchorsOf := map[string]map[string]bool{}
	for _, f := range mdFiles(t, dir) {
		doc := read(t, filepath.Join(dir, f))
		for _, m := range link.FindAllStringSubmatch(stripCode(doc), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := filepath.Join(dir, f)
			if path != "" {
				file = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(file, ".md") {
				a, ok := anchorsOf[file]
				if !ok {
					a = anchors(read(t, file))
					anchorsOf[file] = a
				}
				if !a[frag] {
					t.Errorf("%s: link %q: no heading with anchor #%s in %s", f, target, frag, filepath.Base(file))
				}
			}
		}
	}
}

// block is a fenced block marked runnable.
type block struct {
	file   string
	line   int
	script string
}

// runnable extracts the ```sh blocks preceded by <!-- runnable -->.
func runnable(file, doc string) []block {
	var blocks []block
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n, prev := 0, ""
	var cur *block
	var body []string
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur != nil && fence.MatchString(line):
			cur.script = strings.Join(body, "\n")
			blocks = append(blocks, *cur)
			cur, body = nil, nil
		case cur != nil:
			body = append(body, line)
		case strings.TrimSpace(line) == "```sh" && strings.TrimSpace(prev) == "<!-- runnable -->":
			cur = &block{file: file, line: n}
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	return blocks
}

func TestRunnableBlocks(t *testing.T) {
	dir := root(t)
	var blocks []block
	for _, f := range mdFiles(t, dir) {
		blocks = append(blocks, runnable(f, read(t, filepath.Join(dir, f)))...)
	}
	if len(blocks) == 0 {
		t.Fatal("no block is marked <!-- runnable --> in README.md or docs/")
	}
	bin := filepath.Dir(buildAgentd(t, dir))
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, b := range blocks {
		t.Run(b.file+":"+itoa(b.line), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-e", "-c", b.script)
			cmd.Dir = dir
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("%s line %d: %v\n--- script\n%s\n--- output\n%s", b.file, b.line, err, b.script, out)
			}
		})
	}
}

// quickStart is the README's set-up, byte for byte: the first ```sh block
// under "## Quick start". .ci/run runs the second line's tests.
var quickStart = []string{
	"GOTOOLCHAIN=go1.27.3 go run ./agentd/cmd/agentd",
	"GOTOOLCHAIN=go1.27.3 go test -race -timeout 20m ./...",
}

func TestQuickStart(t *testing.T) {
	dir := root(t)
	readme := read(t, filepath.Join(dir, "README.md"))
	_, after, ok := strings.Cut(readme, "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("README.md's quick start has no ```sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	if got, want := strings.TrimSuffix(block, "\n"), strings.Join(quickStart, "\n"); got != want {
		t.Errorf("README.md's quick start block is\n%s\nwant\n%s", got, want)
	}
	ci := read(t, filepath.Join(dir, ".ci", "run"))
	toolchain, test, _ := strings.Cut(quickStart[1], " ")
	if !strings.Contains(ci, "\nexport "+toolchain+"\n") || !strings.Contains(ci, "\n"+test+"\n") {
		t.Errorf(".ci/run does not run the quick start's tests as the README does: want lines %q and %q", "export "+toolchain, test)
	}
}

var agentdBuild struct {
	once sync.Once
	bin  string // what buildAgentd returns
	// tour: bin was built by README.md's tour line, at its path; made is
	// what that build created (removed when the tests end).
	tour bool
	made string
	// temp is the directory bin was built in when the tour's path held
	// the reader's own binary.
	temp string
	err  error
}

// buildAgentd builds agentd once per test binary and returns its path:
// with README.md's tour line (tourLine), run as written from the root, so
// that TestTourBinary checks the build the other tests use instead of
// linking agentd a second time; with -race when the tests run with it,
// reusing the packages the test build compiled. A binary already at the
// tour's path is the reader's own, maybe stale: it is left alone, and
// agentd is built into a temporary directory instead.
func buildAgentd(t *testing.T, root string) string {
	t.Helper()
	b := &agentdBuild
	b.once.Do(func() {
		line, err := tourLine(root)
		if err != nil {
			b.err = err
			return
		}
		args := strings.Fields(line)[1:] // build -o <path> ./agentd/cmd/agentd
		path := filepath.Join(root, filepath.FromSlash(args[2]))
		if _, err := os.Stat(path); err == nil {
			if b.temp, b.err = os.MkdirTemp("", "docscheck-agentd-"); b.err != nil {
				return
			}
			b.bin = filepath.Join(b.temp, "agentd")
			args[2] = b.bin
		} else {
			b.tour, b.bin = true, path
			b.made = filepath.Dir(path)
			for b.made != root {
				if _, err := os.Stat(filepath.Dir(b.made)); err == nil {
					break
				}
				b.made = filepath.Dir(b.made)
			}
			if _, err := os.Stat(b.made); err == nil {
				b.made = path // the directory exists: only the binary is new
			}
		}
		if raceEnabled {
			args = append([]string{args[0], "-race"}, args[1:]...)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	b := &agentdBuild
	if b.temp != "" {
		os.RemoveAll(b.temp)
	}
	if b.tour && b.made != "" {
		os.RemoveAll(b.made)
	}
	os.Exit(code)
}

var helpFlag = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// TestFlagsDocumented checks that docs/reference.md's flag table has a row
// for every flag agentd -h prints, and none for a flag it does not.
func TestFlagsDocumented(t *testing.T) {
	dir := root(t)
	out, err := exec.Command(buildAgentd(t, dir), "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("agentd -h: %v\n%s", err, out)
	}
	ref := read(t, filepath.Join(dir, "docs", "reference.md"))
	flags := helpFlag.FindAllStringSubmatch(string(out), -1)
	if len(flags) == 0 {
		t.Fatalf("agentd -h printed no flags:\n%s", out)
	}
	listed := map[string]bool{}
	for _, f := range flags {
		listed[f[1]] = true
		if !strings.Contains(ref, "| `--"+f[1]+"`") && !strings.Contains(ref, "| `--"+f[1]+" ") {
			t.Errorf("docs/reference.md has no row for --%s, which agentd -h lists", f[1])
		}
	}
	for _, m := range flagRow.FindAllStringSubmatch(ref, -1) {
		if !listed[m[1]] {
			t.Errorf("docs/reference.md has a row for --%s, which agentd -h does not list", m[1])
		}
	}
}

// flagRow is a row of reference.md's flag table: | `--name arg` | `FOREVER_NAME` |.
var flagRow = regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)[^`]*` \\| `FOREVER_")

// placeholder matches words that mark a page as unfinished, and
// placeholderWords are what it matches, lower case: a line without one
// of them, case folded, cannot match.
var (
	placeholder      = regexp.MustCompile(`(?i)\bstubs?\b|\bbeing added\b|\bon another branch\b|\bTBD\b|\bTODO\b|\bFIXME\b`)
	placeholderWords = []string{"stub", "being added", "on another branch", "tbd", "todo", "fixme"}
)

// TestNoPlaceholders fails on a placeholder left in README.md or docs/: a
// reader gets a section that says nothing.
func TestNoPlaceholders(t *testing.T) {
	dir := root(t)
	// ſ is the one letter outside ASCII that (?i) folds onto one of the
	// words' letters (s) and strings.ToLower does not (K, the Kelvin
	// sign, it maps to k).
	fold := strings.NewReplacer("ſ", "s")
	for _, f := range mdFiles(t, dir) {
		doc := read(t, filepath.Join(dir, f))
		lower := strings.Split(strings.ToLower(fold.Replace(doc)), "\n")
		for i, line := range strings.Split(doc, "\n") {
			// The regexp only where a word is: on the docs' 400 KB it took
			// seconds under -race, the substring search a fraction of one.
			if !slices.ContainsFunc(placeholderWords, func(w string) bool { return strings.Contains(lower[i], w) }) {
				continue
			}
			if m := placeholder.FindString(line); m != "" {
				t.Errorf("%s:%d: placeholder %q: write the section or drop it: %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// tourBuild matches the README tour's build line.
var tourBuild = regexp.MustCompile(`^go build -o (\S+) \./agentd/cmd/agentd$`)

// tourBlock returns the lines of the first ```sh block of README.md's
// tour.
func tourBlock(dir string) ([]string, error) {
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return nil, err
	}
	_, tour, ok := strings.Cut(string(readme), "\n## A five-minute tour\n")
	if !ok {
		return nil, fmt.Errorf(`README.md has no "## A five-minute tour" section`)
	}
	_, block, ok := strings.Cut(tour, "```sh\n")
	if !ok {
		return nil, fmt.Errorf("README.md's tour has no ```sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) < 2 {
		return nil, fmt.Errorf("README.md's tour's first block is %q, want a build line and the line that runs it", block)
	}
	return lines, nil
}

// tourLine returns the build line of README.md's tour, checked against
// tourBuild.
func tourLine(dir string) (string, error) {
	lines, err := tourBlock(dir)
	if err != nil {
		return "", err
	}
	if !tourBuild.MatchString(lines[0]) {
		return "", fmt.Errorf("README.md's tour builds with %q, want go build -o <path> ./agentd/cmd/agentd", lines[0])
	}
	return lines[0], nil
}

// TestTourBinary checks the build line of README.md's tour, which
// buildAgentd runs as written, from the repository root: the binary lands
// where the next line runs it, as a file git ignores; docs/operations.md
// builds it the same way; and every command of README.md and docs/ runs
// that path. Without -race the build is the reader's own; under -race it
// is built with -race, to reuse the packages the test build compiled. A
// binary already at the path (the reader's) is left alone and only
// checked.
func TestTourBinary(t *testing.T) {
	dir := root(t)
	lines, err := tourBlock(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := tourBuild.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("README.md's tour builds with %q, want go build -o <path> ./agentd/cmd/agentd", lines[0])
	}
	bin := m[1]
	run := "./" + strings.TrimPrefix(bin, "./")
	if got := strings.TrimSpace(lines[1]); got != run {
		t.Errorf("README.md's tour runs %q after building %s, want %q", got, bin, run)
	}
	if ops := read(t, filepath.Join(dir, "docs", "operations.md")); !strings.Contains(ops, "\n"+lines[0]+"\n") {
		t.Errorf("docs/operations.md does not build agentd as README.md's tour does (%q)", lines[0])
	}
	// Every command of the docs that runs a local agentd binary runs this one.
	local := regexp.MustCompile(`(?m)^(\./\S*agentd)\s`)
	for _, f := range mdFiles(t, dir) {
		for _, c := range local.FindAllStringSubmatch(read(t, filepath.Join(dir, f)), -1) {
			if c[1] != run {
				t.Errorf("%s runs %s, but the tour builds %s", f, c[1], run)
			}
		}
	}

	path := filepath.Join(dir, filepath.FromSlash(bin))
	if out, err := exec.Command("git", "-C", dir, "check-ignore", "-q", "--no-index", bin).CombinedOutput(); err != nil {
		t.Errorf("git does not ignore the tour's binary %s (add it to .gitignore): %v %s", bin, err, out)
	}
	built := buildAgentd(t, dir)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		t.Fatalf("the tour's binary %s is a directory of the repository", bin)
	}
	if !agentdBuild.tour {
		return // the reader's own build: leave it
	}
	if built != path {
		t.Fatalf("the tour's build made %s, want %s", built, path)
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("after %q, %s is not a file: %v", lines[0], bin, err)
	}
	out, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("git status: %v %s", err, out)
	}
	if len(out) > 0 {
		t.Errorf("after the tour's build, git status shows %s", out)
	}
}
