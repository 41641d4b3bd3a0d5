"""The code lists hreflang values are checked against: data, no logic.

ISO 639-1 language codes (two letters; ``bh`` withdrawn in 2021 but still written, so kept),
ISO 15924 script codes (four letters: ``zh-Hans``, ``zh-Hant``, which Google's hreflang
documentation names) and ISO 3166-1 alpha-2 country codes (the 249 officially assigned ones:
``UK`` and ``EU`` are not among them, which is why ``en-uk`` is a mistake Google's
documentation names; nor are UN M.49 areas such as ``419``). Lower case: hreflang values are
matched case-insensitively.
"""

from __future__ import annotations

__all__ = ["LANGUAGES", "REGIONS", "SCRIPTS"]

_LANGUAGES = """
aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy
da de dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu
hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb
lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om
or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw
ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
"""

_SCRIPTS = """
adlm afak aghb ahom arab aran armi armn avst bali bamu bass batk beng bhks blis bopo brah brai
bugi buhd cakm cans cari cham cher cirt copt cprt cyrl cyrs deva dsrt dupl egyd egyh egyp elba
ethi geok geor glag goth gran grek gujr guru hanb hang hani hano hans hant hatr hebr hira hluw
hmng hrkt hung inds ital jamo java jpan jurc kali kana khar khmr khoj kitl kits knda kore kpel
kthi lana laoo latf latg latn leke lepc limb lina linb lisu loma lyci lydi mahj mand mani marc
maya mend merc mero mlym modi mong moon mroo mtei mult mymr narb nbat newa nkgb nkoo nshu ogam
olck orkh orya osge osma palm pauc perm phag phli phlp phlv phnx piqd plrd prti qaaa qabx rjng
roro runr samr sara sarb saur sgnw shaw shrd sidd sind sinh sora sund sylo syrc syre syrj syrn
tagb takr tale talu taml tang tavt telu teng tfng tglg thaa thai tibt tirh ugar vaii visp wara
wole xpeo xsux yiii zinh zmth zsye zsym zxxx zyyy zzzz
"""

_REGIONS = """
ad ae af ag ai al am ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bl bm bn bo bq br
bs bt bv bw by bz ca cc cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj dk dm do dz
ec ee eg eh er es et fi fj fk fm fo fr ga gb gd ge gf gg gh gi gl gm gn gp gq gr gs gt gu gw
gy hk hm hn hr ht hu id ie il im in io iq ir is it je jm jo jp ke kg kh ki km kn kp kr kw ky
kz la lb lc li lk lr ls lt lu lv ly ma mc md me mf mg mh mk ml mm mn mo mp mq mr ms mt mu mv
mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm pn pr ps pt pw py
qa re ro rs ru rw sa sb sc sd se sg sh si sj sk sl sm sn so sr ss st sv sx sy sz tc td tf tg
th tj tk tl tm tn to tr tt tv tw tz ua ug um us uy uz va vc ve vg vi vn vu wf ws ye yt za zm
zw
"""

# Tables to read, not 615 quoted strings.
LANGUAGES = frozenset(_LANGUAGES.split())
REGIONS = frozenset(_REGIONS.split())
SCRIPTS = frozenset(_SCRIPTS.split())
