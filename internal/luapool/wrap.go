package luapool

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// A built-in's result crosses into Lua unconverted: a map[string]any
// becomes a userdata (a "Go object") whose metamethods convert one field at
// a time, when the script reads it. The default entry file returns the
// built-in's result untouched, so nothing is converted either way and Call
// hands back the very map the built-in made (a whole simulate body used to
// be built as Lua tables and read back into maps: a quarter of the
// simulator's CPU). A script that reads, sets or deletes fields, or walks
// them with pairs, sees what a table would show; README.md lists the
// differences (type() is "userdata"; raw*, next on the table functions).
//
// Arrays ([]any and the other slices toLua knows) become real tables, made
// when the field is first read, so #, ipairs, table.insert/sort/concat and
// unpack work on them; their objects are wrapped in turn.

// wrapTypeName is what tostring shows and what getmetatable returns
// (__metatable), so a script cannot reach or change the shared metatable.
const wrapTypeName = "svcpf object"

// wrapped is a Go object seen from Lua. m is the built-in's map and is
// never written: a result may share parts (the simulator's rendered
// settings document is shared by every answer of a policy). fields holds
// what the script changed and the tables and objects handed out for nested
// values, so that reading r.identity twice gives the same object and a
// change made through it is kept; lua.LNil there is a deleted field.
type wrapped struct {
	m      Object
	fields map[string]lua.LValue
}

// Object is a Go object a built-in may return in place of a
// map[string]any, for a result it would rather not build as a map (the
// simulator's simulate body renders its fields only when they are read or
// written out). It enters Lua as a map does, read field by field, and
// comes back from Call as itself when the script changed nothing; when the
// script changed a field, as a map[string]any of its fields with the
// change. Field values are what a map's would be (a json.RawMessage
// included); they are read once per script read and never written.
type Object interface {
	// Field returns the value of key, and false when the object has no
	// such field.
	Field(key string) (any, bool)
	// Keys returns the object's fields, in any order.
	Keys() []string
}

// mapObject is a map[string]any as an Object.
type mapObject map[string]any

func (m mapObject) Field(key string) (any, bool) { v, ok := m[key]; return v, ok }

func (m mapObject) Keys() []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// wrapResult is toLua for a built-in's result: objects are wrapped, arrays
// become tables (their objects wrapped), anything else is converted as
// toLua converts it.
func (c *converter) wrapResult(L *lua.LState, v any) (lua.LValue, error) {
	return c.wrapValue(L, v, 0)
}

func (c *converter) wrapValue(L *lua.LState, v any, depth int) (lua.LValue, error) {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			x = map[string]any{} // read back as {}, as a table made from it was
		}
		ud := L.NewUserData()
		ud.Value = &wrapped{m: mapObject(x)}
		ud.Metatable = c.objectMT
		return ud, nil
	case Object:
		ud := L.NewUserData()
		ud.Value = &wrapped{m: x}
		ud.Metatable = c.objectMT
		return ud, nil
	case json.RawMessage:
		// JSON a built-in rendered once and shares (the simulator's
		// settings document): decoded only when the script reads it. It
		// comes back as is when the script leaves it alone.
		var decoded any
		if err := json.Unmarshal(x, &decoded); err != nil {
			return nil, &convError{msg: "json.RawMessage: " + err.Error()}
		}
		return c.wrapValue(L, decoded, depth)
	case []any:
		if depth >= maxDepth {
			return nil, &convError{msg: fmt.Sprintf("values nested more than %d deep", maxDepth)}
		}
		t := c.newArray(L, len(x))
		for i, e := range x {
			lv, err := c.wrapValue(L, e, depth+1)
			if err != nil {
				return nil, under(err, "["+strconv.Itoa(i+1)+"]")
			}
			t.RawSetInt(i+1, lv)
		}
		return t, nil
	}
	return c.luaValue(L, v, depth)
}

// newObjectMT makes the metatable shared by a worker's wrapped objects.
func (c *converter) newObjectMT(L *lua.LState) *lua.LTable {
	mt := L.NewTable()
	mt.RawSetString("__index", L.NewFunction(c.objIndex))
	mt.RawSetString("__newindex", L.NewFunction(c.objNewIndex))
	mt.RawSetString("__len", L.NewFunction(objLen))
	mt.RawSetString("__tostring", L.NewFunction(objToString))
	mt.RawSetString("__metatable", lua.LString(wrapTypeName))
	return mt
}

// asObject returns the wrapped object v holds, if it is one.
func asObject(v lua.LValue) (*wrapped, bool) {
	ud, ok := v.(*lua.LUserData)
	if !ok {
		return nil, false
	}
	w, ok := ud.Value.(*wrapped)
	return w, ok
}

// get is obj[key] as the script sees it.
func (c *converter) get(L *lua.LState, w *wrapped, key string) lua.LValue {
	if lv, ok := w.fields[key]; ok {
		return lv
	}
	v, ok := w.m.Field(key)
	if !ok || v == nil {
		return lua.LNil
	}
	switch v.(type) {
	case map[string]any, []any, []string, []map[string]any, []int, []int64, []float64, map[string]string, json.RawMessage, Object:
		// Made once and kept: the same table or object on every read,
		// and whatever the script changes in it is part of the result.
		lv, err := c.wrapValue(L, v, 1)
		if err != nil {
			L.RaiseError("%s: %v", key, err)
		}
		if w.fields == nil {
			w.fields = make(map[string]lua.LValue, 4)
		}
		w.fields[key] = lv
		return lv
	}
	lv, err := c.luaValue(L, v, 1)
	if err != nil {
		L.RaiseError("%s: %v", key, err)
	}
	return lv
}

func (c *converter) objIndex(L *lua.LState) int {
	w, _ := asObject(L.Get(1))
	key, ok := L.Get(2).(lua.LString)
	if w == nil || !ok {
		L.Push(lua.LNil) // an object's keys are strings: o[1] is nil, as in a table without it
		return 1
	}
	L.Push(c.get(L, w, string(key)))
	return 1
}

func (c *converter) objNewIndex(L *lua.LState) int {
	w, _ := asObject(L.Get(1))
	key, ok := L.Get(2).(lua.LString)
	if w == nil || !ok {
		L.RaiseError("a %s's keys are strings, not %s", wrapTypeName, L.Get(2).Type())
		return 0
	}
	if w.fields == nil {
		w.fields = make(map[string]lua.LValue, 4)
	}
	w.fields[string(key)] = L.Get(3) // lua.LNil: deleted
	return 0
}

// objLen is #obj: an object has no array part, so 0, as for a table with
// only string keys.
func objLen(L *lua.LState) int {
	L.Push(lua.LNumber(0))
	return 1
}

func objToString(L *lua.LState) int {
	L.Push(lua.LString(wrapTypeName))
	return 1
}

// keys are the object's present keys in sorted order: pairs and next walk
// them in that order (a table's order is unspecified; a fixed one makes
// scripts reproducible).
func (w *wrapped) keys() []string {
	own := w.m.Keys()
	ks := make([]string, 0, len(own)+len(w.fields))
	for _, k := range own {
		if _, changed := w.fields[k]; !changed {
			if v, _ := w.m.Field(k); v != nil {
				ks = append(ks, k)
			}
		}
	}
	for k, lv := range w.fields {
		if lv != lua.LNil {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// next is next(obj, key) over keys().
func (c *converter) next(L *lua.LState, w *wrapped, after lua.LValue) int {
	ks := w.keys()
	i := 0
	if after != lua.LNil {
		s, ok := after.(lua.LString)
		if !ok {
			L.RaiseError("invalid key to 'next'")
		}
		j, found := slices.BinarySearch(ks, string(s))
		if !found {
			L.RaiseError("invalid key to 'next'")
		}
		i = j + 1
	}
	if i >= len(ks) {
		L.Push(lua.LNil)
		return 1
	}
	L.Push(lua.LString(ks[i]))
	L.Push(c.get(L, w, ks[i]))
	return 2
}

// installIteration replaces pairs and next with versions that also walk
// wrapped objects (gopher-lua's pairs has no __pairs); on tables they are
// the originals.
func (c *converter) installIteration(L *lua.LState) {
	g := L.G.Global
	next := L.NewFunction(func(L *lua.LState) int {
		if w, ok := asObject(L.Get(1)); ok {
			return c.next(L, w, L.Get(2))
		}
		// A table: what the base library's next does.
		k, v := L.CheckTable(1).Next(L.Get(2))
		if k == lua.LNil {
			L.Push(lua.LNil)
			return 1
		}
		L.Push(k)
		L.Push(v)
		return 2
	})
	pairs := L.NewFunction(func(L *lua.LState) int {
		v := L.Get(1)
		if _, ok := asObject(v); !ok {
			L.CheckTable(1)
		}
		L.Push(next)
		L.Push(v)
		L.Push(lua.LNil)
		return 3
	})
	g.RawSetString("next", next)
	g.RawSetString("pairs", pairs)
}

// goWrapped is toGo of a wrapped object: the built-in's own map when the
// script changed nothing in it, else a new map with the changes applied
// (the original is shared and never written).
func (c *converter) goWrapped(w *wrapped) (any, error) {
	if len(w.fields) == 0 {
		if m, ok := w.m.(mapObject); ok {
			return map[string]any(m), nil
		}
		return w.m, nil
	}
	if len(c.path) >= maxDepth {
		return nil, &convError{msg: fmt.Sprintf("tables nested more than %d deep", maxDepth)}
	}
	for _, seen := range c.path {
		if seen == any(w) {
			return nil, &convError{msg: "the table contains itself"}
		}
	}
	c.path = append(c.path, w)
	defer func() { c.path = c.path[:len(c.path)-1] }()
	var out map[string]any
	if m, ok := w.m.(mapObject); ok {
		out = maps.Clone(map[string]any(m))
	} else {
		ks := w.m.Keys()
		out = make(map[string]any, len(ks)+len(w.fields))
		for _, k := range ks {
			out[k], _ = w.m.Field(k)
		}
	}
	for k, lv := range w.fields {
		if lv == lua.LNil {
			delete(out, k)
			continue
		}
		gv, err := c.goValue(lv)
		if err != nil {
			return nil, under(err, "."+k)
		}
		if gv == nil {
			delete(out, k)
			continue
		}
		out[k] = gv
	}
	return out, nil
}
