package envadapters

import (
	"strings"
	"testing"
)

func TestOptions(t *testing.T) {
	o := Options{"max_steps": "20", "placement_prior": "0.8", "bad_int": "2.5", "bad_float": "often", "inf": "Inf", "blank": " "}
	check := func(call string, got, want any, err error, wantErr bool, key string) {
		t.Helper()
		if (err != nil) != wantErr || !wantErr && got != want {
			t.Errorf("%s(%s) = %v, %v; want %v (error %v)", call, key, got, err, want, wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), key) {
			t.Errorf("%s(%s) error %q does not name the option", call, key, err)
		}
	}
	for _, tc := range []struct {
		key     string
		want    int
		wantErr bool
	}{{"max_steps", 20, false}, {"missing", 7, false}, {"bad_int", 0, true}, {"blank", 7, false}} {
		got, err := o.Int(tc.key, 7)
		check("Int", got, tc.want, err, tc.wantErr, tc.key)
	}
	for _, tc := range []struct {
		key     string
		want    float64
		wantErr bool
	}{{"placement_prior", 0.8, false}, {"max_steps", 20, false}, {"missing", 0.5, false}, {"bad_float", 0, true}, {"inf", 0, true}, {"blank", 0.5, false}} {
		got, err := o.Float(tc.key, 0.5)
		check("Float", got, tc.want, err, tc.wantErr, tc.key)
	}
	w := o.With("max_steps", "30")
	if w["max_steps"] != "30" || o["max_steps"] != "20" || w["placement_prior"] != "0.8" {
		t.Errorf("With: %v from %v (the original must not change)", w, o)
	}
	if n := Options(nil).With("k", "v"); len(n) != 1 || n["k"] != "v" {
		t.Errorf("With on nil options: %v", n)
	}
	if err := (Options{"max_steps": "1"}).CheckKeys("max_steps"); err != nil {
		t.Error(err)
	}
	if err := (Options{"colour": "red"}).CheckKeys("max_steps"); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown key: %v", err)
	}
}
