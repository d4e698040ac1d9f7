// Package waitfor lets a test wait until something has happened instead of
// sleeping for a guess at how long it takes.
//
// A test that sleeps to synchronise is slow when the guess is generous and
// flaky when the machine is slower than the guess. A test that polls the
// condition it needs is as fast as the code under test and fails only when
// the condition never holds.
//
// The bound (Bound unless Within is used) is not a timing assertion: it only
// keeps a broken test from hanging, so it is generous. A test that must show
// that something does not happen within some time still sleeps, with a
// comment saying so.
//
// Invariants:
//   - the condition is checked at once, so a condition that already holds
//     costs no wait; then again every 10 ms, the interval growing to
//     100 ms, so a long wait does not load the machine it waits on;
//   - a condition that never holds fails the test with its description (or
//     its last error) once the bound passes, and never earlier;
//   - the functions call t.Fatal, so, as with t.Fatal, call them from the
//     goroutine running the test.
package waitfor
