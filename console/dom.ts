/** The page's element with this id, as the type the page gives it (index.html). */
export function element<T extends HTMLElement> (id: string): T {
  return document.getElementById(id) as T
}
