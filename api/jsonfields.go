package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// unknownField returns a key of the JSON value data that a value of type t
// has no field for, looking into nested objects, arrays and maps as
// encoding/json does (a key matches a field's name exactly, else without
// regard to case). Among several unknown keys of one object it names the
// first in sorted order. data must be valid JSON that decodes into t.
func unknownField(data []byte, t reflect.Type) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return "", false // the type reads its own JSON
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return "", false
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ft, ok := fieldFor(fields, k)
			if !ok {
				return k, true
			}
			if name, ok := unknownField(obj[k], ft); ok {
				return name, true
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return "", false
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if name, ok := unknownField(obj[k], t.Elem()); ok {
				return name, true
			}
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return "", false
		}
		for _, it := range items {
			if name, ok := unknownField(it, t.Elem()); ok {
				return name, true
			}
		}
	}
	return "", false
}

// jsonFields maps the JSON names of a struct's fields (promoted fields of
// embedded structs included) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			continue // its fields are visible on their own
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := fields[name]; !dup {
			fields[name] = f.Type
		}
	}
	return fields
}

// fieldFor finds the field a key decodes into: its exact name, else one
// equal to it without regard to case.
func fieldFor(fields map[string]reflect.Type, key string) (reflect.Type, bool) {
	if t, ok := fields[key]; ok {
		return t, true
	}
	for name, t := range fields {
		if strings.EqualFold(name, key) {
			return t, true
		}
	}
	return nil, false
}
