package luapool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The VM's own bounds. A call deeper than callStackSize frames, or needing
// more than registryMaxSize stack slots, fails with "stack overflow" or
// "registry overflow" instead of growing without limit.
const (
	// callStackSize counts Lua and Go frames alike; 200 is how deep Lua 5.1
	// lets C calls nest (LUAI_MAXCCALLS), ample for request handling, and it
	// keeps the Go stack small where Lua and Go calls interleave (pcall,
	// metamethods, sort comparators).
	callStackSize = 200
	registrySize  = 256 * 20
	// registryMaxSize is 1 MiB of value slots: over 300 locals and
	// temporaries for each of 200 frames (Lua 5.1 itself lets unpack return
	// only 8000 values).
	registryMaxSize = 64 * 1024
	// registryGrowStep is large because every growth copies the registry:
	// gopher-lua's default (32) makes reaching the maximum quadratic, seconds
	// of copying for unpack({}, 1, 1e8).
	registryGrowStep = 4096
	// maxRepBytes bounds string.rep, the one library function that turns a
	// short instruction into an arbitrarily large allocation.
	maxRepBytes = 1 << 20
)

type request struct {
	ctx context.Context
	fn  string
	arg any
}

type response struct {
	val any
	err error
}

// worker is one Lua state and the goroutine that owns it: only loop (and,
// before loop starts, newWorker) touches L.
type worker struct {
	L       *lua.LState
	conv    converter
	modules map[string]*lua.LTable
	errMT   *lua.LTable // metatable of Go errors raised in Lua
	hint    string
	logger  *slog.Logger
	timeout time.Duration

	req  chan request
	resp chan response // buffered: an abandoned worker's late answer does not block it
	quit chan struct{} // closed when the worker is abandoned
	// ctx and timer are the calls' context and time bound, reused from
	// call to call by Pool.run (callctx.go).
	ctx   *callContext
	timer *time.Timer
}

// newWorker creates a sandboxed state and runs the entry file's top level in
// it, bounded by the call timeout.
func (p *Pool) newWorker() (*worker, error) {
	L := lua.NewState(lua.Options{
		SkipOpenLibs:     true,
		CallStackSize:    callStackSize,
		RegistrySize:     registrySize,
		RegistryMaxSize:  registryMaxSize,
		RegistryGrowStep: registryGrowStep,
	})
	w := &worker{
		L:       L,
		hint:    p.moduleHint,
		logger:  p.logger,
		timeout: p.timeout,
		req:     make(chan request),
		resp:    make(chan response, 1),
		quit:    make(chan struct{}),
		ctx:     newCallContext(),
		timer:   time.NewTimer(time.Hour),
	}
	w.timer.Stop()
	if err := w.openSandbox(p.modules); err != nil {
		L.Close()
		return nil, fmt.Errorf("luapool: opening the sandbox: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	L.SetContext(ctx)
	L.Push(L.NewFunctionFromProto(p.proto))
	err := L.PCall(0, 0, nil)
	L.RemoveContext()
	L.SetTop(0)
	if err != nil {
		L.Close()
		return nil, fmt.Errorf("luapool: %w", w.scriptError("", err, ctx))
	}
	return w, nil
}

// openSandbox opens the base, table, string and math libraries, removes what
// reaches outside the state, and installs require, print, a bounded
// string.rep and the modules.
func (w *worker) openSandbox(modules map[string]Module) error {
	L := w.L
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name))
		if err != nil {
			return err
		}
	}
	g := L.G.Global
	// Removed from the base library: loading code (dofile, loadfile: the
	// file system; load, loadstring: code compiled at run time, outside the
	// entry file that was reviewed and compiled once), module and
	// gopher-lua's require (the package library's file loaders; require is
	// replaced), collectgarbage (runs a full Go GC of the whole process),
	// _printregs and print (write to stdout; print is replaced).
	for _, name := range [...]string{
		"dofile", "loadfile", "load", "loadstring", "module", "require",
		"collectgarbage", "_printregs", "print",
	} {
		g.RawSetString(name, lua.LNil)
	}
	g.RawSetString("require", L.NewFunction(w.require))
	g.RawSetString("print", L.NewFunction(w.print))
	str, ok := g.RawGetString("string").(*lua.LTable)
	if !ok {
		return errors.New("no string library")
	}
	// The string metatable's __index is this same table, so s:rep() is
	// bounded too.
	str.RawSetString("rep", L.NewFunction(boundedRep))
	str.RawSetString("dump", lua.LNil) // byte code out is the twin of load; gopher-lua only raises anyway

	w.conv.arrayMT = L.NewTable()
	w.conv.arrayMT.RawSetString(jsonTypeField, lua.LString(jsonTypeArray))
	w.conv.objectMT = w.conv.newObjectMT(L)
	w.conv.installIteration(L)

	w.errMT = L.NewTable()
	w.errMT.RawSetString("__tostring", L.NewFunction(errToString))
	w.errMT.RawSetString("__concat", L.NewFunction(errConcat))
	w.errMT.RawSetString("__index", L.NewFunction(errIndex))

	w.modules = make(map[string]*lua.LTable, len(modules))
	for name, m := range modules {
		t := L.CreateTable(0, len(m))
		for fname, f := range m {
			t.RawSetString(fname, L.NewFunction(w.builtin(name+"."+fname, f)))
		}
		w.modules[name] = t
	}
	return nil
}

// loop serves calls until the worker is abandoned or the pool closed; the
// state is closed by the goroutine that used it, after its last call.
func (w *worker) loop(closed <-chan struct{}) {
	defer w.L.Close()
	for {
		select {
		case r := <-w.req:
			v, err := w.call(r.ctx, r.fn, r.arg)
			w.resp <- response{v, err}
		case <-w.quit:
			return
		case <-closed:
			return
		}
	}
}

// call runs one global function. Everything done here outside PCall is raw
// (no metamethods), so no script code can raise an error that escapes it.
func (w *worker) call(ctx context.Context, fn string, arg any) (any, error) {
	L := w.L
	L.SetContext(ctx)
	defer func() {
		// A call that failed has already been unwound by PCall; this drops
		// the result and the context, so the next call starts clean and a
		// done request context is not kept alive by an idle worker.
		L.SetTop(0)
		L.RemoveContext()
		w.conv.clearArg()
	}()
	f, ok := L.G.Global.RawGetString(fn).(*lua.LFunction)
	if !ok {
		return nil, &ScriptError{Func: fn, Message: fmt.Sprintf("the entry script defines no global function %q", fn), Err: ErrNoFunction}
	}
	L.Push(f)
	nargs := 0
	if arg != nil {
		lv, err := w.conv.setArg(L, arg)
		if err != nil {
			return nil, fmt.Errorf("luapool: %s: argument: %w", fn, err)
		}
		L.Push(lv)
		nargs = 1
	}
	if err := L.PCall(nargs, 1, nil); err != nil {
		return nil, w.scriptError(fn, err, ctx)
	}
	v, err := w.conv.toGo(ctx, L.Get(-1))
	if err != nil {
		return nil, &ScriptError{Func: fn, Message: "result: " + err.Error(), Err: ctx.Err()}
	}
	return v, nil
}

// scriptError turns PCall's error into a ScriptError, recovering the Go
// error a built-in raised and naming the context's error when the call was
// stopped.
func (w *worker) scriptError(fn string, err error, ctx context.Context) *ScriptError {
	se := &ScriptError{Func: fn, Message: err.Error()}
	var ae *lua.ApiError
	if errors.As(err, &ae) {
		se.Traceback = ae.StackTrace
		se.Message = ae.Object.String()
		if ud, ok := ae.Object.(*lua.LUserData); ok {
			if goErr, ok := ud.Value.(error); ok {
				se.Err, se.Message = goErr, goErr.Error()
			}
		}
	}
	if se.Err == nil {
		if cerr := ctx.Err(); cerr != nil {
			se.Err = cerr
			if errors.Is(cerr, context.DeadlineExceeded) {
				se.Message += fmt.Sprintf(" (a call may run %v)", w.timeout)
			}
		}
	}
	return se
}

// builtin adapts a Func to Lua.
func (w *worker) builtin(name string, f Func) lua.LGFunction {
	return func(L *lua.LState) int {
		top := L.GetTop()
		args := make([]any, top)
		for i := 1; i <= top; i++ {
			v, err := w.conv.argBack(L.Context(), L.Get(i))
			if err != nil {
				L.RaiseError("%s: argument %d: %v", name, i, err)
			}
			args[i-1] = v
		}
		res, err := f(L.Context(), args)
		if err != nil {
			// Raised as a userdata, not a string, so that the Go error
			// itself reaches Call's caller (errors.As) when the script
			// does not catch it.
			ud := L.NewUserData()
			ud.Value = err
			ud.Metatable = w.errMT
			L.Error(ud, 1)
		}
		lv, err := w.conv.wrapResult(L, res)
		if err != nil {
			L.RaiseError("%s: result: %v", name, err)
		}
		L.Push(lv)
		return 1
	}
}

// errToString is a raised Go error's __tostring: its message.
func errToString(L *lua.LState) int {
	L.Push(lua.LString(errMessage(L.Get(1))))
	return 1
}

// errConcat lets a script write "failed: " .. err.
func errConcat(L *lua.LState) int {
	L.Push(lua.LString(concatPart(L, L.Get(1)) + concatPart(L, L.Get(2))))
	return 1
}

func concatPart(L *lua.LState, v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return v.String()
	case *lua.LUserData:
		if _, ok := v.Value.(error); ok {
			return errMessage(v)
		}
	}
	L.RaiseError("attempt to concatenate a %s value", v.Type())
	return ""
}

// errIndex is a raised Go error's __index: err.message is its message.
func errIndex(L *lua.LState) int {
	if L.Get(2) == lua.LString("message") {
		L.Push(lua.LString(errMessage(L.Get(1))))
		return 1
	}
	L.Push(lua.LNil)
	return 1
}

func errMessage(v lua.LValue) string {
	if ud, ok := v.(*lua.LUserData); ok {
		if err, ok := ud.Value.(error); ok {
			return err.Error()
		}
	}
	return v.String()
}

// require returns a preloaded module; there is nothing else to load.
func (w *worker) require(L *lua.LState) int {
	name := L.CheckString(1)
	if m, ok := w.modules[name]; ok {
		L.Push(m)
		return 1
	}
	L.RaiseError("module %s not found (%s)", name, w.hint)
	return 0
}

// print sends its arguments, tab-separated as Lua's print does, to the
// logger at debug level; with no logger (or debug off) it does nothing, not
// even the conversion.
func (w *worker) print(L *lua.LState) int {
	ctx := L.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	if w.logger == nil || !w.logger.Enabled(ctx, slog.LevelDebug) {
		return 0
	}
	var b strings.Builder
	for i := 1; i <= L.GetTop(); i++ {
		if i > 1 {
			b.WriteByte('\t')
		}
		b.WriteString(L.ToStringMeta(L.Get(i)).String())
	}
	w.logger.LogAttrs(ctx, slog.LevelDebug, "lua print", slog.String("text", b.String()))
	return 0
}

// boundedRep is string.rep with its result capped at maxRepBytes.
func boundedRep(L *lua.LState) int {
	s := L.CheckString(1)
	n := L.CheckInt(2)
	if n <= 0 || s == "" {
		L.Push(lua.LString(""))
		return 1
	}
	if n > maxRepBytes/len(s) {
		L.RaiseError("string.rep: %d copies of %d bytes exceed the %d-byte limit", n, len(s), maxRepBytes)
	}
	L.Push(lua.LString(strings.Repeat(s, n)))
	return 1
}
