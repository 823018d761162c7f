package household

import (
	"errors"
	"fmt"
)

// expert solves a task from the true state: fetch the goal object (opening
// containers on the way), transform it at the right appliance, then deliver
// it (or switch the lamp on while holding it).
type expert struct {
	env *Env
}

// ErrExpertStuck means the expert found no way forward (a generator bug).
var ErrExpertStuck = errors.New("household expert: no plan from this state")

func (x *expert) Act() (string, error) {
	e := x.env
	if e.done {
		return "", errors.New("household expert: the episode is over")
	}
	g := e.w.goal
	if e.held != nil && e.held.typ != g.obj {
		// Holding something else (the expert took over mid-episode): put it
		// down at the first open surface.
		if e.at != nil && (!e.at.openable || e.at.open) {
			return fmt.Sprintf("move %s to %s", e.held.name, e.at.name), nil
		}
		for _, rc := range e.w.receps {
			if !rc.openable && rc.typ != g.target {
				return "go to " + rc.name, nil
			}
		}
		return "", ErrExpertStuck
	}
	switch g.family {
	case LookInLight:
		if e.held == nil {
			return x.fetch(g.obj)
		}
		if e.at != e.w.lamp.loc {
			return "go to " + e.w.lamp.loc.name, nil
		}
		return "use " + e.w.lamp.name, nil
	default:
		if e.held == nil {
			return x.fetch(g.obj)
		}
		if !hasProperty(e.held, g.family) {
			app := map[string]string{PickClean: "sinkbasin", PickHeat: "microwave", PickCool: "fridge"}[g.family]
			rc := x.first(app)
			if rc == nil {
				return "", ErrExpertStuck
			}
			if e.at != rc {
				return "go to " + rc.name, nil
			}
			verb := map[string]string{PickClean: "clean", PickHeat: "heat", PickCool: "cool"}[g.family]
			return fmt.Sprintf("%s %s with %s", verb, e.held.name, rc.name), nil
		}
		rc := x.first(g.target)
		if rc == nil {
			return "", ErrExpertStuck
		}
		if e.at != rc {
			return "go to " + rc.name, nil
		}
		if rc.openable && !rc.open {
			return "open " + rc.name, nil
		}
		return fmt.Sprintf("move %s to %s", e.held.name, rc.name), nil
	}
}

// first is the first receptacle of a type, in listing order.
func (x *expert) first(typ string) *recep {
	for _, rc := range x.env.w.receps {
		if rc.typ == typ {
			return rc
		}
	}
	return nil
}

// fetch goes to, opens and takes the nearest (first listed) goal object not
// already delivered.
func (x *expert) fetch(typ string) (string, error) {
	e := x.env
	g := e.w.goal
	for _, rc := range e.w.receps {
		if rc.typ == g.target && g.family != LookInLight {
			continue // already delivered ones stay
		}
		for _, o := range rc.contents {
			if o.typ != typ {
				continue
			}
			if e.at != rc {
				return "go to " + rc.name, nil
			}
			if rc.openable && !rc.open {
				return "open " + rc.name, nil
			}
			return fmt.Sprintf("take %s from %s", o.name, rc.name), nil
		}
	}
	return "", ErrExpertStuck
}
