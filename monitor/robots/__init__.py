"""robots.txt, under one roof: what Google's parser decides for a URL (``matcher``, pure), the
``Sitemap:`` lines of a file (``sitemaps``, pure), how a fetched version is judged (``judge``,
pure) and how two versions differ (``versiondiff``, pure); and the one reader and cache the
check and the URL checks share (``reader``). The versions are stored by
``monitor.store.robotsversions``; a check watches its hosts' files in
``monitor.check.robotswatch``.
"""
