package host_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
	"github.com/forever-agents/forever/chat"
	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
	"github.com/forever-agents/forever/internal/apierror/apierrortest"
)

// TestDeclaredSentences: every client-visible sentinel in the module,
// found where it is declared (apierror.Declare), names its own package
// and a sentence that names no Go package or type, so what a client
// reads never depends on cutting a package's name out of an error.
func TestDeclaredSentences(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(x ast.Node) bool {
			call, ok := x.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Declare" || len(call.Args) != 3 {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "apierror" {
				return true
			}
			pkg, err1 := literal(call.Args[0])
			sentence, err2 := literal(call.Args[2])
			where := fset.Position(call.Pos()).String()
			if err1 != nil || err2 != nil {
				t.Errorf("%s: declare with string literals, so this test reads them", where)
				return true
			}
			n++
			if pkg != f.Name.Name {
				t.Errorf("%s: declared for package %q in package %s", where, pkg, f.Name.Name)
			}
			apierrortest.CheckMessage(t, where, sentence)
			if strings.HasPrefix(sentence, f.Name.Name+":") {
				t.Errorf("%s: the sentence %q starts with its package", where, sentence)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found %d declared sentinels, want chat's, eventlog's, auth's and agents' (20 or more)", n)
	}
}

func literal(e ast.Expr) (string, error) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", errors.New("not a string literal")
	}
	return strconv.Unquote(lit.Value)
}

// newpkgError is an error of a package added tomorrow, which declares no
// answer: it has a code (as a StatusCode method, or as an eventlog
// sentinel) and a Go text.
type newpkgError struct{}

func (newpkgError) Error() string   { return "newpkg: internal words" }
func (newpkgError) StatusCode() int { return 409 }

// TestClientErrorSentences: what a client reads comes from the declared
// error: its sentence and the detail its site wrote; an error that
// declares none gets its code's fixed sentence, so no package's prefix
// leaks, the ones of tomorrow included.
func TestClientErrorSentences(t *testing.T) {
	type answer struct {
		code int
		want string
	}
	for _, tc := range []struct {
		name string
		err  error
		answer
	}{
		{"a class's Wrapf", host.ErrBadRequest.Wrapf("limit must be from 1 to %d, got %d", 100, 0), answer{400, "limit must be from 1 to 100, got 0"}},
		{"a class wrapped", fmt.Errorf("%w: steps must be 1..100000", host.ErrBadRequest), answer{400, "steps must be 1..100000"}},
		{"chat's sentinel in a class", fmt.Errorf("%w: %w", host.ErrConflict, fmt.Errorf("%w: turn r1 waits for recovery", chat.ErrTurnActive)), answer{409, "a turn is already active: turn r1 waits for recovery"}},
		{"eventlog's declared 503", fmt.Errorf("agentd: append: %w", fmt.Errorf("%w: JetStream store full: 48.0 MiB used of 48.0 MiB (--js-max-store)", eventlog.ErrStorageFull)), answer{503, "storage full: JetStream store full: 48.0 MiB used of 48.0 MiB (--js-max-store)"}},
		{"a remote answer", &host.RemoteError{Node: "n2", Code: 409, Msg: "a turn is already active"}, answer{409, "a turn is already active"}},
		{"tomorrow's package", fmt.Errorf("agentd: op: %w", newpkgError{}), answer{409, apierror.Text(409)}},
		{"tomorrow's package in a class", fmt.Errorf("%w: %w", host.ErrConflict, newpkgError{}), answer{409, apierror.Text(409)}},
		{"eventlog's undeclared sentinel", fmt.Errorf("newpkg: write: %w", eventlog.ErrConflict), answer{409, apierror.Text(409)}},
		{"an internal error", errors.New("newpkg: internal words"), answer{500, apierror.Text(500)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := host.ClientError(tc.err)
			if e.Code != tc.code || e.Message != tc.want {
				t.Fatalf("ClientError = %d %q, want %d %q", e.Code, e.Message, tc.code, tc.want)
			}
			if strings.Contains(e.Message, "newpkg") {
				t.Fatalf("a package's words leaked: %q", e.Message)
			}
		})
	}
}
