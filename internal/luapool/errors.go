package luapool

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by Call after Close.
var ErrClosed = errors.New("luapool: pool closed")

// ErrNoFunction is wrapped by the error of a Call whose function the entry
// script does not define as a global function.
var ErrNoFunction = errors.New("no such global function")

// ScriptError is a call that failed inside a worker: a Lua runtime error, an
// error(...) raised by the script, a Go built-in's error the script did not
// catch, a result that cannot be converted, or a call stopped by its
// deadline or its caller's cancellation.
type ScriptError struct {
	// Func is the global function called; "" for the entry file's top level
	// while a worker is created.
	Func string
	// Message is the script's message, with "file:line:" when Lua knows the
	// position.
	Message string
	// Traceback is Lua's stack traceback when there is one (for logs; not
	// part of Error()).
	Traceback string
	// Err is the cause when the failure came from Go: the error a built-in
	// returned (so errors.As finds the caller's own error types), ErrNoFunction,
	// or the context's error (context.DeadlineExceeded, context.Canceled).
	Err error
}

func (e *ScriptError) Error() string {
	fn := e.Func
	if fn == "" {
		fn = "entry file"
	}
	return fmt.Sprintf("lua %s: %s", fn, e.Message)
}

// Unwrap returns the Go cause, if any.
func (e *ScriptError) Unwrap() error { return e.Err }
