package luapool

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// Conversion bounds: a result deeper than maxDepth tables, or with more than
// maxValues values in all, is an error rather than a stack overflow or an
// unbounded allocation (a table that contains itself is caught earlier, as a
// cycle; a table shared n times below itself doubles per level, which only
// the value count stops).
const (
	maxDepth  = 64
	maxValues = 1 << 18
)

// A table's metatable field __jsontype ("array" or "object", dkjson's
// convention) says what an ambiguous table is: an empty one (an object by
// default) or one with keys 1..n (an array by default).
const (
	jsonTypeField  = "__jsontype"
	jsonTypeArray  = "array"
	jsonTypeObject = "object"
)

// maxExactInt is the largest magnitude below which every integer is a
// float64: such numbers come out of Lua as int64, so JSON prints 3, not 3.0
// or 3e+00.
const maxExactInt = 1 << 53

// converter converts between Go and Lua values for one worker; its buffers
// are reused from call to call.
type converter struct {
	arrayMT  *lua.LTable // set on every array made from Go, so that an empty one stays an array
	objectMT *lua.LTable // of every wrapped Go object (wrap.go)
	path     []any       // the tables and wrapped objects being converted, outermost first: a cycle check
	values   int
	ctx      context.Context
	// arg is the table the current call's argument became and argMap the
	// map it was made from (flat: strings, numbers and booleans only), so
	// that a built-in handed that table back unchanged gets the map itself
	// instead of a copy (argBack); nil when the argument is something else.
	arg    *lua.LTable
	argMap map[string]any
}

// ctxCheckEvery is how many values toGo converts between looks at its
// context: a result of maxValues takes long enough that a call's deadline
// must stop it too (the VM's own checks have ended by then).
const ctxCheckEvery = 1024

// convError is a conversion failure and where in the value it happened.
type convError struct {
	at  string // e.g. .categories[2].code
	msg string
}

func (e *convError) Error() string {
	if e.at == "" {
		return e.msg
	}
	return e.at + ": " + e.msg
}

// under prefixes err's location with one step (".key" or "[i]").
func under(err error, step string) error {
	if ce, ok := err.(*convError); ok {
		ce.at = step + ce.at
	}
	return err
}

// toGo converts a Lua value: nil, booleans and strings as themselves;
// numbers as int64 when integral and exactly representable, else float64
// (NaN and ±Inf are errors);
// a table with keys 1..n (holes allowed while at least half the slots are
// used, as lua-cjson allows) as []any with nil in the holes; any other table
// as map[string]any, number keys written as decimal strings; an empty table
// as map[string]any{} unless its metatable says __jsontype = "array".
// Functions, userdata, threads, and tables keyed by anything but strings and
// numbers are errors.
func (c *converter) toGo(ctx context.Context, lv lua.LValue) (any, error) {
	c.path = c.path[:0]
	c.values = 0
	c.ctx = ctx
	v, err := c.goValue(lv)
	c.ctx = nil // not kept alive by an idle worker
	return v, err
}

func (c *converter) goValue(lv lua.LValue) (any, error) {
	c.values++
	if c.values > maxValues {
		return nil, &convError{msg: fmt.Sprintf("more than %d values", maxValues)}
	}
	if c.values%ctxCheckEvery == 0 && c.ctx != nil {
		if err := c.ctx.Err(); err != nil {
			return nil, &convError{msg: "stopped: " + err.Error()}
		}
	}
	switch v := lv.(type) {
	case *lua.LNilType:
		return nil, nil
	case lua.LBool:
		return bool(v), nil
	case lua.LString:
		return string(v), nil
	case lua.LNumber:
		// 0/0 and 1/0 are numbers in Lua but not in JSON: refused here, as
		// a function is, rather than left for the body's encoder to fail
		// on after the call counted as a success.
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &convError{msg: "the number " + strconv.FormatFloat(f, 'g', -1, 64) + " has no JSON form"}
		}
		return goNumber(v), nil
	case *lua.LTable:
		return c.goTable(v)
	case *lua.LUserData:
		if w, ok := v.Value.(*wrapped); ok {
			return c.goWrapped(w)
		}
	}
	return nil, &convError{msg: "a " + lv.Type().String() + " has no JSON form"}
}

func goNumber(n lua.LNumber) any {
	f := float64(n)
	if f == math.Trunc(f) && math.Abs(f) <= maxExactInt {
		return int64(f)
	}
	return f
}

func (c *converter) goTable(t *lua.LTable) (any, error) {
	if len(c.path) >= maxDepth {
		return nil, &convError{msg: fmt.Sprintf("tables nested more than %d deep", maxDepth)}
	}
	for _, seen := range c.path {
		if seen == any(t) {
			return nil, &convError{msg: "the table contains itself"}
		}
	}
	c.path = append(c.path, t)
	defer func() { c.path = c.path[:len(c.path)-1] }()

	jt := jsonType(t)
	if jt != jsonTypeObject {
		if n, ok := arrayLen(t, jt == jsonTypeArray); ok {
			return c.goArray(t, n)
		}
	}
	return c.goObject(t)
}

// jsonType is the table's metatable's __jsontype, or "".
func jsonType(t *lua.LTable) string {
	mt, ok := t.Metatable.(*lua.LTable)
	if !ok {
		return ""
	}
	s, _ := mt.RawGetString(jsonTypeField).(lua.LString)
	return string(s)
}

// arrayLen reports whether t reads as an array and its length: keys 1..n
// only, with at most half of them holes (or n <= 10, or any number when
// marked an array), or empty and marked an array. It reads the table raw and does not allocate but for one key.
func arrayLen(t *lua.LTable, markedArray bool) (int, bool) {
	n := t.MaxN() // the last non-nil slot of the array part
	if n == 0 {
		k, _ := t.Next(lua.LNil)
		return 0, k == lua.LNil && markedArray
	}
	if k, _ := t.Next(lua.LNumber(n)); k != lua.LNil {
		return 0, false // keys beyond the array part: strings, or numbers Lua keeps in the hash
	}
	holes := 0
	for i := 1; i <= n; i++ {
		if t.RawGetInt(i) == lua.LNil {
			holes++
		}
	}
	return n, markedArray || holes == 0 || n <= 10 || holes <= n/2
}

func (c *converter) goArray(t *lua.LTable, n int) (any, error) {
	out := make([]any, n)
	for i := range n {
		v, err := c.goValue(t.RawGetInt(i + 1))
		if err != nil {
			return nil, under(err, "["+strconv.Itoa(i+1)+"]")
		}
		out[i] = v
	}
	return out, nil
}

func (c *converter) goObject(t *lua.LTable) (any, error) {
	// Next, not ForEach: ForEach boxes every string key into a new
	// interface value, Next hands out the keys the table already holds.
	n := 0
	for k, _ := t.Next(lua.LNil); k != lua.LNil; k, _ = t.Next(k) {
		n++
	}
	out := make(map[string]any, n)
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		var key string
		switch k := k.(type) {
		case lua.LString:
			key = string(k)
		case lua.LNumber:
			switch n := goNumber(k).(type) {
			case int64:
				key = strconv.FormatInt(n, 10)
			default:
				key = strconv.FormatFloat(float64(k), 'g', -1, 64)
			}
		default:
			return nil, &convError{msg: "a " + k.Type().String() + " key has no JSON form"}
		}
		gv, err := c.goValue(v)
		if err != nil {
			return nil, under(err, "."+key)
		}
		out[key] = gv
	}
	return out, nil
}

// toLua converts a Go value: nil, bool, string and every integer and float
// kind as themselves (numbers are float64 in Lua: integers beyond 2^53 lose
// precision); []any, []string, []map[string]any and the common number
// slices as array tables marked __jsontype = "array" (so an empty one comes
// back as []); map[string]any and map[string]string as tables (a nil value
// leaves its key out: a Lua table cannot hold nil; a nil element of a slice
// is a hole, kept as nil on the way back unless trailing); anything else
// through encoding/json, as the JSON body would show it.
func (c *converter) toLua(L *lua.LState, v any) (lua.LValue, error) {
	return c.luaValue(L, v, 0)
}

func (c *converter) luaValue(L *lua.LState, v any, depth int) (lua.LValue, error) {
	switch x := v.(type) {
	case nil:
		return lua.LNil, nil
	case bool:
		return lua.LBool(x), nil
	case string:
		return lua.LString(x), nil
	case int:
		return lua.LNumber(x), nil
	case int8:
		return lua.LNumber(x), nil
	case int16:
		return lua.LNumber(x), nil
	case int32:
		return lua.LNumber(x), nil
	case int64:
		return lua.LNumber(x), nil
	case uint:
		return lua.LNumber(x), nil
	case uint8:
		return lua.LNumber(x), nil
	case uint16:
		return lua.LNumber(x), nil
	case uint32:
		return lua.LNumber(x), nil
	case uint64:
		return lua.LNumber(x), nil
	case uintptr:
		return lua.LNumber(x), nil
	case float32:
		return lua.LNumber(x), nil
	case float64:
		return lua.LNumber(x), nil
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return lua.LNumber(f), nil
		}
		return lua.LString(x), nil
	}
	if depth >= maxDepth {
		return nil, &convError{msg: fmt.Sprintf("values nested more than %d deep", maxDepth)}
	}
	depth++
	switch x := v.(type) {
	case []any:
		t := c.newArray(L, len(x))
		for i, e := range x {
			lv, err := c.luaValue(L, e, depth)
			if err != nil {
				return nil, under(err, "["+strconv.Itoa(i+1)+"]")
			}
			t.RawSetInt(i+1, lv)
		}
		return t, nil
	case []string:
		t := c.newArray(L, len(x))
		for i, e := range x {
			t.RawSetInt(i+1, lua.LString(e))
		}
		return t, nil
	case []map[string]any:
		t := c.newArray(L, len(x))
		for i, e := range x {
			lv, err := c.luaValue(L, e, depth)
			if err != nil {
				return nil, under(err, "["+strconv.Itoa(i+1)+"]")
			}
			t.RawSetInt(i+1, lv)
		}
		return t, nil
	case []int:
		return numberArray(c, L, x), nil
	case []int64:
		return numberArray(c, L, x), nil
	case []float64:
		return numberArray(c, L, x), nil
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, e := range x {
			lv, err := c.luaValue(L, e, depth)
			if err != nil {
				return nil, under(err, "."+k)
			}
			if lv != lua.LNil {
				t.RawSetString(k, lv)
			}
		}
		return t, nil
	case map[string]string:
		t := L.CreateTable(0, len(x))
		for k, e := range x {
			t.RawSetString(k, lua.LString(e))
		}
		return t, nil
	}
	// Structs, typed slices and maps, pointers, json.Marshalers: what
	// encoding/json makes of them, which is what the caller's JSON body
	// would show. Slower, but the common shapes above never get here.
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &convError{msg: fmt.Sprintf("%T: %v", v, err)}
	}
	var decoded any
	if err := json.Unmarshal(b, &decoded); err != nil {
		return nil, &convError{msg: fmt.Sprintf("%T: %v", v, err)}
	}
	return c.luaValue(L, decoded, depth-1)
}

func (c *converter) newArray(L *lua.LState, n int) *lua.LTable {
	t := L.CreateTable(n, 0)
	t.Metatable = c.arrayMT
	return t
}

func numberArray[E int | int64 | float64](c *converter, L *lua.LState, xs []E) *lua.LTable {
	t := c.newArray(L, len(xs))
	for i, e := range xs {
		t.RawSetInt(i+1, lua.LNumber(e))
	}
	return t
}

// setArg converts a call's argument as toLua does, remembering a flat
// map's table for argBack.
func (c *converter) setArg(L *lua.LState, v any) (lua.LValue, error) {
	c.arg, c.argMap = nil, nil
	lv, err := c.toLua(L, v)
	if err != nil {
		return nil, err
	}
	if m, ok := v.(map[string]any); ok && flat(m) {
		c.arg, c.argMap = lv.(*lua.LTable), m
	}
	return lv, nil
}

// clearArg forgets the call's argument (not kept alive by an idle worker).
func (c *converter) clearArg() { c.arg, c.argMap = nil, nil }

// flat reports whether every value of m is a string, a bool or a number
// of a kind luaValue converts without allocating: the kinds argBack can
// compare with what the table holds.
func flat(m map[string]any) bool {
	for _, v := range m {
		switch v.(type) {
		case nil, string, bool, int, int64, float64:
		default:
			return false
		}
	}
	return true
}

// argBack is toGo of a built-in's argument, except that the call's own
// argument table, handed back with exactly the fields it was made with
// (none changed, added or removed, no metatable set), is the map Call was
// given rather than a copy: the request table of every simulate makes
// this round trip, and the copy was a map and a boxed value per field.
func (c *converter) argBack(ctx context.Context, lv lua.LValue) (any, error) {
	if t, ok := lv.(*lua.LTable); ok && t == c.arg && c.unchanged(t) {
		return c.argMap, nil
	}
	return c.toGo(ctx, lv)
}

// unchanged reports whether t holds exactly the non-nil fields of
// c.argMap, with equal values (numbers as toLua made them).
func (c *converter) unchanged(t *lua.LTable) bool {
	if t.Metatable != lua.LNil {
		return false
	}
	n := 0
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		ks, ok := k.(lua.LString)
		if !ok {
			return false
		}
		gv, ok := c.argMap[string(ks)]
		if !ok || !sameScalar(v, gv) {
			return false
		}
		n++
	}
	for _, v := range c.argMap {
		if v == nil {
			n++ // left out of the table: toLua drops nil fields
		}
	}
	return n == len(c.argMap)
}

// sameScalar reports whether lv is what luaValue makes of v.
func sameScalar(lv lua.LValue, v any) bool {
	switch x := v.(type) {
	case string:
		s, ok := lv.(lua.LString)
		return ok && string(s) == x
	case bool:
		b, ok := lv.(lua.LBool)
		return ok && bool(b) == x
	case int:
		n, ok := lv.(lua.LNumber)
		return ok && n == lua.LNumber(x)
	case int64:
		n, ok := lv.(lua.LNumber)
		return ok && n == lua.LNumber(x)
	case float64:
		n, ok := lv.(lua.LNumber)
		return ok && n == lua.LNumber(x)
	}
	return false
}
