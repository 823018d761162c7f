// Package builtins registers every built-in environment seedctl ships: a
// program that opens, checks or lists environments imports it once, and a
// new environment is one package plus one line here.
package builtins

import (
	_ "github.com/seedctl/seedctl/envadapters/agentgym"  // registers "textcraft-sim"
	_ "github.com/seedctl/seedctl/envadapters/household" // registers "household"
	_ "github.com/seedctl/seedctl/envadapters/searchqa"  // registers "searchqa"
	_ "github.com/seedctl/seedctl/envadapters/webshop"   // registers "webshop"
)
