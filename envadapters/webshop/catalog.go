// Package webshop is a WebShop-like environment: a generated catalog of
// products with attributes, options and prices; shopping instructions with
// attribute, option and price constraints; the search/click action space
// over search, results, item and detail pages; and WebShop's reward (score
// 0-100, success = 100). eval_unseen holds out product categories.
package webshop

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
)

type category struct {
	name     string
	nouns    []string
	attrs    []string
	options  map[string][]string
	priceMin float64
	priceMax float64
	unseen   bool
}

var colors = []string{"black", "white", "grey", "navy blue", "red", "brown", "green", "pink"}

var categories = []category{
	{name: "shoes", nouns: []string{"running shoes", "sneakers", "boots", "sandals"}, attrs: []string{"non slip", "lightweight", "water resistant", "arch support", "memory foam", "rubber sole"},
		options: map[string][]string{"color": colors, "size": {"6", "7", "8", "9", "10", "11", "12"}}, priceMin: 25, priceMax: 140},
	{name: "shirts", nouns: []string{"t-shirt", "polo shirt", "button down shirt"}, attrs: []string{"machine wash", "cotton", "slim fit", "long sleeve", "short sleeve", "moisture wicking"},
		options: map[string][]string{"color": colors, "size": {"small", "medium", "large", "x-large"}}, priceMin: 9, priceMax: 60},
	{name: "headphones", nouns: []string{"wireless earbuds", "headphones", "bluetooth headset"}, attrs: []string{"noise cancelling", "long battery life", "fast charging", "water resistant", "hands free"},
		options: map[string][]string{"color": colors}, priceMin: 15, priceMax: 250},
	{name: "coffee", nouns: []string{"ground coffee", "coffee beans", "instant coffee"}, attrs: []string{"organic", "dark roast", "decaf", "fair trade", "gluten free"},
		options: map[string][]string{"flavor": {"vanilla", "hazelnut", "original", "caramel"}, "size": {"12 ounce", "1 pound", "2 pound"}}, priceMin: 6, priceMax: 45},
	{name: "shampoo", nouns: []string{"shampoo", "conditioner", "hair oil"}, attrs: []string{"sulfate free", "paraben free", "natural ingredients", "for dry hair", "cruelty free"},
		options: map[string][]string{"scent": {"lavender", "coconut", "mint", "unscented"}, "size": {"8 fl oz", "16 fl oz", "32 fl oz"}}, priceMin: 5, priceMax: 40},
	{name: "phone cases", nouns: []string{"phone case", "iphone case"}, attrs: []string{"shockproof", "slim", "wireless charging compatible", "clear", "kickstand"},
		options: map[string][]string{"color": colors}, priceMin: 6, priceMax: 35},
	{name: "backpacks", nouns: []string{"backpack", "laptop backpack", "hiking backpack"}, attrs: []string{"water resistant", "usb charging port", "anti theft", "lightweight", "large capacity"},
		options: map[string][]string{"color": colors}, priceMin: 18, priceMax: 120},
	{name: "snacks", nouns: []string{"protein bars", "granola", "trail mix"}, attrs: []string{"gluten free", "low sugar", "high protein", "non gmo", "vegan"},
		options: map[string][]string{"flavor": {"chocolate", "peanut butter", "berry", "original"}, "size": {"6 count", "12 count", "24 count"}}, priceMin: 5, priceMax: 40},
	{name: "lamps", nouns: []string{"desk lamp", "floor lamp", "table lamp"}, attrs: []string{"dimmable", "led", "usb port", "touch control", "eye caring"},
		options: map[string][]string{"color": colors}, priceMin: 15, priceMax: 150, unseen: true},
	{name: "pillow covers", nouns: []string{"throw pillow covers", "pillow cases"}, attrs: []string{"machine washable", "soft", "decorative", "zipper closure", "velvet"},
		options: map[string][]string{"color": colors, "size": {"18x18 inch", "20x20 inch", "22x22 inch"}}, priceMin: 8, priceMax: 45, unseen: true},
}

var brandSyllables = []string{"zen", "vo", "lux", "ara", "kin", "tek", "mo", "sol", "nova", "fi", "dex", "ora", "pix", "ula", "bry"}

// product is one catalog item.
type product struct {
	asin    string
	cat     *category
	noun    string
	title   string
	attrs   []string
	options map[string][]string // option type → values offered
	price   float64
	desc    string
	feature string
}

func (p *product) optionTypes() []string {
	ts := make([]string, 0, len(p.options))
	for t := range p.options {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// searchText is what the search engine indexes.
func (p *product) searchText() string {
	return p.title + " " + strings.Join(p.attrs, " ") + " " + p.noun + " " + p.cat.name
}

// CatalogSize is the number of generated products.
const CatalogSize = 1500

const catalogSeed = 424242

func buildCatalog() []*product {
	r := rand.New(rand.NewPCG(catalogSeed, 3))
	used := map[string]bool{}
	var out []*product
	for i := 0; i < CatalogSize; i++ {
		c := &categories[i%len(categories)]
		p := &product{cat: c, noun: c.nouns[r.IntN(len(c.nouns))], options: map[string][]string{}}
		for {
			const alnum = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
			b := []byte("B0")
			for k := 0; k < 8; k++ {
				b = append(b, alnum[r.IntN(len(alnum))])
			}
			if !used[string(b)] {
				used[string(b)] = true
				p.asin = string(b)
				break
			}
		}
		attrs := append([]string(nil), c.attrs...)
		r.Shuffle(len(attrs), func(a, b int) { attrs[a], attrs[b] = attrs[b], attrs[a] })
		p.attrs = attrs[:2+r.IntN(3)]
		sort.Strings(p.attrs)
		types := make([]string, 0, len(c.options))
		for t := range c.options {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			vals := append([]string(nil), c.options[t]...)
			r.Shuffle(len(vals), func(a, b int) { vals[a], vals[b] = vals[b], vals[a] })
			p.options[t] = vals[:2+r.IntN(min(4, len(vals)-1))]
		}
		p.price = math.Round((c.priceMin+r.Float64()*(c.priceMax-c.priceMin))*100) / 100
		brand := brandSyllables[r.IntN(len(brandSyllables))] + brandSyllables[r.IntN(len(brandSyllables))]
		brand = strings.ToUpper(brand[:1]) + brand[1:]
		p.title = fmt.Sprintf("%s %s %s", brand, capWords(p.attrs[r.IntN(len(p.attrs))]), capWords(p.noun))
		if r.IntN(2) == 0 {
			p.title += " for " + []string{"Men", "Women", "Everyday Use", "Travel", "Home", "Office"}[r.IntN(6)]
		}
		p.desc = fmt.Sprintf("%s. Made by %s. %s.", p.title, brand, capWords(strings.Join(p.attrs, ", ")))
		p.feature = "Features: " + strings.Join(p.attrs, "; ")
		out = append(out, p)
	}
	return out
}

func capWords(s string) string {
	ws := strings.Fields(s)
	for i, w := range ws {
		ws[i] = strings.ToUpper(w[:1]) + w[1:]
	}
	return strings.Join(ws, " ")
}

// goal is a shopping instruction with the product it was written from.
type goal struct {
	target  *product
	attrs   []string
	options map[string]string
	price   float64
	text    string
}

// evalProduct partitions targets between training and evaluation.
func evalProduct(p *product) bool {
	h := fnv.New32a()
	h.Write([]byte(p.asin))
	return h.Sum32()%5 == 0
}

func makeGoal(catalog []*product, seed uint64, wantEval, unseen bool) goal {
	r := rand.New(rand.NewPCG(seed, 5))
	var p *product
	for {
		p = catalog[r.IntN(len(catalog))]
		if p.cat.unseen == unseen && (unseen || evalProduct(p) == wantEval) {
			break
		}
	}
	g := goal{target: p, options: map[string]string{}}
	attrs := append([]string(nil), p.attrs...)
	r.Shuffle(len(attrs), func(a, b int) { attrs[a], attrs[b] = attrs[b], attrs[a] })
	g.attrs = attrs[:1+r.IntN(2)]
	sort.Strings(g.attrs)
	var opts []string
	for _, t := range p.optionTypes() {
		v := p.options[t][r.IntN(len(p.options[t]))]
		g.options[t] = v
		opts = append(opts, fmt.Sprintf("%s: %s", t, v))
	}
	g.price = math.Ceil(p.price*(1.1+0.7*r.Float64())/10) * 10
	g.text = fmt.Sprintf("i need %s %s, with %s, and price lower than %.2f dollars",
		strings.Join(g.attrs, " and "), p.noun, strings.Join(opts, " and "), g.price)
	if r.IntN(2) == 0 {
		g.text = fmt.Sprintf("i am looking for %s that is %s, with %s, and price lower than %.2f dollars",
			p.noun, strings.Join(g.attrs, " and "), strings.Join(opts, " and "), g.price)
	}
	return g
}

// reward is WebShop's formula: the share of matched constraints (goal
// attributes, goal options, price) scaled by a product-type match.
func reward(g goal, p *product, chosen map[string]string) (float64, string) {
	have := map[string]bool{}
	for _, a := range p.attrs {
		have[a] = true
	}
	attrHit := 0
	for _, a := range g.attrs {
		if have[a] {
			attrHit++
		}
	}
	optHit := 0
	for t, v := range g.options {
		if chosen[t] == v {
			optHit++
		}
	}
	priceOK := 0
	if p.price <= g.price {
		priceOK = 1
	}
	typeW := 0.1
	switch {
	case p.cat == g.target.cat && p.noun == g.target.noun:
		typeW = 1
	case p.cat == g.target.cat:
		typeW = 0.5
	}
	total := float64(attrHit+optHit+priceOK) / float64(len(g.attrs)+len(g.options)+1) * typeW
	why := fmt.Sprintf("attributes %d/%d, options %d/%d, price %d/1, type %.1f", attrHit, len(g.attrs), optHit, len(g.options), priceOK, typeW)
	return total, why
}
