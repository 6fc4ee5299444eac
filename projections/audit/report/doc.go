// Package report says in words what package audit found: the text tether replay prints for
// verify, history, state and receipt (with --json it prints audit's values instead). It decides
// nothing: every function takes audit's (or eventlog's) values and returns lines, except
// Progress, which draws a walk's progress on a terminal.
package report
