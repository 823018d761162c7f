package envadapters

import (
	"strings"
	"testing"
)

func TestOptions(t *testing.T) {
	o := Options{"max_steps": "20", "placement_prior": "0.8", "bad_int": "2.5", "bad_float": "often", "inf": "Inf", "blank": " "}
	ints := []struct {
		key     string
		want    int
		wantErr bool
	}{{"max_steps", 20, false}, {"missing", 7, false}, {"bad_int", 0, true}, {"blank", 7, false}}
	for _, tc := range ints {
		got, err := o.Int(tc.key, 7)
		if (err != nil) != tc.wantErr || !tc.wantErr && got != tc.want {
			t.Errorf("Int(%s) = %v, %v; want %v (error %v)", tc.key, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Int(%s) error %q does not name the option", tc.key, err)
		}
	}
	floats := []struct {
		key     string
		want    float64
		wantErr bool
	}{{"placement_prior", 0.8, false}, {"max_steps", 20, false}, {"missing", 0.5, false}, {"bad_float", 0, true}, {"inf", 0, true}, {"blank", 0.5, false}}
	for _, tc := range floats {
		got, err := o.Float(tc.key, 0.5)
		if (err != nil) != tc.wantErr || !tc.wantErr && got != tc.want {
			t.Errorf("Float(%s) = %v, %v; want %v (error %v)", tc.key, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Float(%s) error %q does not name the option", tc.key, err)
		}
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
