/**
 * What a person sees of a call: a failure in words they can act on, and a form that cannot be
 * sent twice while its call is under way.
 */
import { ApiFailure } from './api.js'

/**
 * Shows a failure in `container` (a role="alert" element): the API's message as it is, when to
 * try again after a 429, that the service is unavailable after a 503, and the request id that
 * matches the answer with the service's log. `retry` adds a Retry button where trying again can
 * help (a 503, no answer).
 */
export function showProblem (container: HTMLElement, error: unknown, retry?: () => void): void {
  const failure = error instanceof ApiFailure ? error : new ApiFailure(0, 'Something went wrong in the page', null, null)
  if (!(error instanceof ApiFailure)) console.error(error)
  const lines = [failure.message.endsWith('.') ? failure.message : `${failure.message}.`]
  if (failure.status === 429) lines.push(`Try again in ${failure.retryAfter ?? 60} s.`)
  if (failure.status === 503) {
    lines.push(`The service is unavailable${failure.retryAfter === null ? '' : `; try again in ${failure.retryAfter} s`}.`)
  }
  if (failure.requestId !== null) lines.push(`Request id: ${failure.requestId}`)
  const parts: Node[] = [document.createTextNode(lines.join(' '))]
  if (retry !== undefined && (failure.status === 503 || failure.status === 0)) {
    const button = document.createElement('button')
    button.type = 'button'
    button.textContent = 'Retry'
    button.addEventListener('click', () => { clearProblem(container); retry() })
    parts.push(document.createTextNode(' '), button)
  }
  container.replaceChildren(...parts)
}

export function clearProblem (container: HTMLElement): void {
  container.replaceChildren()
}

/** The alert of a form, where its failures are shown. */
export function problemOf (form: HTMLFormElement): HTMLElement {
  return form.querySelector<HTMLElement>('.problem')!
}

/** Runs `work` with the form's buttons disabled, so a double click sends nothing twice. */
export async function busy<T> (form: HTMLFormElement, work: () => Promise<T>): Promise<T> {
  const buttons = [...form.querySelectorAll('button')]
  for (const button of buttons) button.disabled = true
  form.setAttribute('aria-busy', 'true')
  try {
    return await work()
  } finally {
    for (const button of buttons) button.disabled = false
    form.removeAttribute('aria-busy')
  }
}

/** Whether a failure is the answer 412: the book changed since the version the call named. */
export function changedMeanwhile (error: unknown): boolean {
  return error instanceof ApiFailure && error.status === 412
}

/** Whether a failure is the answer 404: the book is gone. */
export function gone (error: unknown): boolean {
  return error instanceof ApiFailure && error.status === 404
}
