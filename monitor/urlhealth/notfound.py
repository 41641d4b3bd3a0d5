"""Whether a page's title or heading says, in so many words, that the page was not found. Pure.

A title or a heading is evidence of a soft 404 only when one of its parts is a WHOLE not-found
phrase: "Page not found", "404 Not Found", "Seite nicht gefunden". A phrase inside a longer
text is a page about something ("Rare vinyl not found in stores", "404 Coupé"), and a false
soft 404 costs a site more than a missed one. A title is cut into parts at the separators
sites put between a message and their name ("Page not found | Shop"), each part into its
sentences ("Oops! That page can't be found."); a sentence is compared whole, in lower case,
its spaces evened out.

The phrases cover the languages most used on the web: English, Spanish, German, Japanese,
French, Russian, Portuguese, Italian, Dutch, Polish, Turkish and Chinese (simplified and
traditional), in the wordings of the common CMSs, shops and frameworks.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["PHRASES", "says_not_found"]

PHRASES: frozenset[str] = frozenset({
    # English
    "not found", "page not found", "404 not found", "404 page not found", "error 404",
    "404 error", "error 404 page not found", "404 error page not found", "file not found",
    "404 file not found", "page does not exist", "this page does not exist",
    "the page does not exist", "page doesn't exist", "this page doesn't exist",
    "that page can't be found", "this page can't be found", "page can't be found",
    "the page can't be found", "page cannot be found", "the page cannot be found",
    "this page could not be found", "page could not be found", "the page could not be found",
    "the requested page could not be found", "the page you requested could not be found",
    "the page you requested was not found", "the requested url was not found on this server",
    "the requested resource was not found on this server",
    "the page you were looking for doesn't exist", "the page you are looking for doesn't exist",
    "the page you were looking for does not exist", "the page you are looking for does not exist",
    "the page you're looking for can't be found", "we can't find that page",
    "we couldn't find that page", "we couldn't find the page you were looking for",
    "sorry we couldn't find that page", "nothing was found at this location",
    "it looks like nothing was found at this location", "page not found 404",
    "404 page", "error page not found", "oops page not found", "sorry page not found",
    "file or directory not found", "404 file or directory not found",
    "the requested page was not found", "this page isn't available",
    "sorry this page isn't available",
    # Spanish
    "página no encontrada", "pagina no encontrada", "no encontrado", "no encontrada",
    "error 404 página no encontrada", "la página no existe", "esta página no existe",
    "página no existe", "no se encontró la página", "no se ha encontrado la página",
    "la página que buscas no existe", "la página que buscas no se encuentra",
    "lo sentimos la página que buscas no existe", "página no disponible",
    # German
    "seite nicht gefunden", "nicht gefunden", "fehler 404", "404 fehler",
    "fehler 404 seite nicht gefunden", "die seite wurde nicht gefunden",
    "seite wurde nicht gefunden", "die angeforderte seite wurde nicht gefunden",
    "die seite existiert nicht", "diese seite existiert nicht", "seite existiert nicht",
    "die gesuchte seite wurde nicht gefunden", "leider wurde die seite nicht gefunden",
    "die seite konnte nicht gefunden werden", "seite konnte nicht gefunden werden",
    # Japanese
    "ページが見つかりません", "ページが見つかりませんでした",
    "お探しのページは見つかりませんでした",
    "お探しのページが見つかりません", "お探しのページは見つかりません", "ページは存在しません",
    "お探しのページは存在しません", "見つかりません", "404 ページが見つかりません",
    "指定されたページは存在しません", "お探しのページは削除されたか存在しません",
    # French
    "page non trouvée", "page non trouvee", "page introuvable", "erreur 404",
    "erreur 404 page introuvable", "erreur 404 page non trouvée", "non trouvé", "non trouvée",
    "introuvable", "cette page n'existe pas", "la page n'existe pas",
    "la page demandée est introuvable", "la page que vous recherchez est introuvable",
    "la page demandée n'existe pas", "oups page introuvable", "désolé page introuvable",
    # Russian
    "страница не найдена", "ошибка 404", "404 страница не найдена",
    "ошибка 404 страница не найдена", "не найдено", "страница не существует",
    "такой страницы не существует", "запрашиваемая страница не найдена",
    "к сожалению страница не найдена",
    # Portuguese
    "página não encontrada", "pagina nao encontrada", "erro 404", "não encontrado",
    "não encontrada", "erro 404 página não encontrada", "a página não existe",
    "esta página não existe", "página não existe", "a página que procura não existe",
    "a página que você procura não existe", "a página solicitada não foi encontrada",
    "ops página não encontrada",
    # Italian
    "pagina non trovata", "errore 404", "errore 404 pagina non trovata", "non trovato",
    "non trovata", "pagina non esistente", "la pagina non esiste", "questa pagina non esiste",
    "la pagina richiesta non è stata trovata", "la pagina che cerchi non esiste",
    "ops pagina non trovata",
    # Dutch
    "pagina niet gevonden", "niet gevonden", "fout 404", "404 pagina niet gevonden",
    "deze pagina bestaat niet", "pagina bestaat niet", "oeps pagina niet gevonden",
    # Polish
    "nie znaleziono strony", "strona nie została znaleziona", "strona nie istnieje",
    "błąd 404", "nie znaleziono", "404 nie znaleziono strony", "ta strona nie istnieje",
    "nie znaleziono strony 404", "podana strona nie istnieje",
    # Turkish
    "sayfa bulunamadı", "bulunamadı", "404 hatası", "hata 404", "404 sayfa bulunamadı",
    "aradığınız sayfa bulunamadı",
    # Chinese
    "页面未找到", "找不到页面", "页面不存在", "404 页面不存在", "404 页面未找到", "网页不存在",
    "找不到网页", "您访问的页面不存在", "抱歉 页面不存在", "您要访问的页面不存在",
    "頁面不存在", "網頁不存在", "找不到網頁", "找不到頁面", "頁面未找到", "您要的頁面不存在",
    "糟糕 页面不存在",
})
# Words that only introduce the message: "Oops! That page can't be found.", "404: This page
# could not be found.", "抱歉, 页面不存在" (with a full-width comma). Never evidence alone.
FILLERS: frozenset[str] = frozenset({
    "404", "error", "error 404", "404 error", "oops", "whoops", "sorry", "oh no", "uh oh", "hmm",
    "we're sorry", "oups", "désolé", "erreur", "erreur 404", "ops", "ups", "hoppla", "oh",
    "fehler", "fehler 404", "lo sentimos", "vaya", "ошибка", "ошибка 404", "к сожалению", "упс",
    "errore", "errore 404", "erro", "erro 404", "błąd", "błąd 404", "przepraszamy", "oeps",
    "fout 404", "hata", "hata 404", "抱歉", "糟糕", "对不起", "對不起", "すみません",
    "申し訳ございません", "申し訳ありません",
})
# Between a page's message and the site's name: "Page not found | Shop", "404 - Pagina non
# trovata". A hyphen inside a word ("e-commerce") does not cut.
_SEGMENTS = re.compile(r"\s[-~/·»«]\s|\s*[|•｜]\s*|\s*::\s*|\s*[–—]\s*")
# Between the sentences of a message: "Oops! That page can't be found."
_SENTENCES = re.compile(r"\s*[:!?¡¿.…,;，、。！？：()\[\]「」『』«»\"“”„]+\s*")
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'", "`": "'"})
_SPACE = re.compile(r"\s+")


def says_not_found(text: str) -> str | None:
    """The part of ``text`` (a title or a heading) that is a whole not-found phrase, or None.

    A part of a title between the site's separators counts when its sentences are all
    not-found phrases or words that introduce one ("Oops!", "404:"), one phrase at least; a
    first part that is only "404" or "Error 404" counts too ("404 | Shop")."""
    normal = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()
                        .translate(_APOSTROPHES)).strip()
    for index, segment in enumerate(_SEGMENTS.split(normal)):
        sentences = [part for part in _SENTENCES.split(segment) if part]
        if not sentences:
            continue
        found = [part for part in sentences if part in PHRASES]
        if found and all(part in PHRASES or part in FILLERS for part in sentences):
            return found[0]
        if index == 0 and len(sentences) == 1 and sentences[0] in ("404", "error 404"):
            return sentences[0]
    return None
