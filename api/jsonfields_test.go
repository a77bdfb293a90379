package api

import (
	"reflect"
	"testing"
)

func TestUnknownField(t *testing.T) {
	t.Parallel()
	type inner struct {
		A string `json:"a"`
	}
	type Embedded struct {
		E int `json:"e"`
	}
	type outer struct {
		Embedded
		Name   string           `json:"name,omitempty"`
		Plain  int              // no tag: its Go name
		Skip   int              `json:"-"`
		In     *inner           `json:"in"`
		List   []inner          `json:"list"`
		ByName map[string]inner `json:"by_name"`
		Any    any              `json:"any"`
	}
	tests := []struct {
		name, body, want string
	}{
		{name: "known fields", body: `{"name":"x","Plain":1,"e":2,"in":{"a":"y"},"list":[{"a":"z"}],"by_name":{"k":{"a":"w"}},"any":{"free":1}}`},
		{name: "case-insensitive match", body: `{"NAME":"x","plain":1}`},
		{name: "null object", body: `{"in":null}`},
		{name: "top-level unknown", body: `{"name":"x","zeta":1,"alpha":2}`, want: "alpha"},
		{name: "dash-tagged is unknown", body: `{"Skip":1}`, want: "Skip"},
		{name: "nested object", body: `{"in":{"a":"y","b":1}}`, want: "b"},
		{name: "in an array", body: `{"list":[{"a":"y"},{"c":1}]}`, want: "c"},
		{name: "in a map value", body: `{"by_name":{"k":{"d":1}}}`, want: "d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := unknownField([]byte(tc.body), reflect.TypeFor[*outer]())
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("unknownField(%s) = %q, %t; want %q", tc.body, got, ok, tc.want)
			}
		})
	}
}
